"""pytest-sme2: performance regression tests of ExecuTorch models on Arm CPUs with and without SME2.

Public API: the names below, and ``pytest_sme2.report``'s ``__all__`` (reports of profiles made outside
pytest). Everything else is private, whatever its module's name.
"""

from pytest_sme2._version import __version__ as __version__  # re-exported: the package version
from pytest_sme2.errors import (
    BaselineError,
    DamagedCacheEntryWarning,
    EtdumpError,
    ExportError,
    KernelSamplingWarning,
    MissingBaselineWarning,
    ModelDefinitionError,
    OneProcessIntervalWarning,
    ProgramError,
    RunnerError,
    Sme2DeprecationWarning,
    Sme2Error,
    Sme2Warning,
    StorageError,
    UninitialisedWeightsWarning,
    UnknownModelError,
    UsageError,
)
from pytest_sme2.evidence.categories import Category, classify
from pytest_sme2.evidence.kernel_sampling import KernelTime
from pytest_sme2.export.export import ExportedModel, Recipe
from pytest_sme2.export.llm_families import llm_params
from pytest_sme2.gate.assertions import (
    assert_delegation,
    assert_kernel_share,
    assert_no_modelled_sme2_slowdown,
    assert_no_sme2_slowdown,
    assert_outputs_match,
    assert_portable_ops,
    assert_share,
    assert_sme2_kernel_path,
    assert_sme2_not_slower_at_any_threads,
    assert_speedup,
)
from pytest_sme2.gate.checks.base import Check, Pair
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Status, Tolerances, Verdict
from pytest_sme2.measure.llm import LlmProfile, LlmSequence
from pytest_sme2.measure.runner import Runner, Timings
from pytest_sme2.measure.session import Sme2Session
from pytest_sme2.measure.thread_scaling import ThreadScaling
from pytest_sme2.model.registry import register_model
from pytest_sme2.profile.profile import Profile
from pytest_sme2.profile.speedup import Speedup
from pytest_sme2.profile.stats import Interval, SampleStats
from pytest_sme2.run.callgrind import InstructionCount, count_instructions
from pytest_sme2.run.targets import RunSpec, TargetInfo
from pytest_sme2.run.targets.base import DoctorLine, RegisteredTarget, RunResult, Target, TargetSettings
from pytest_sme2.system.option import Option

__all__ = [
    "BaselineError",
    "Category",
    "Check",
    "DamagedCacheEntryWarning",
    "DoctorLine",
    "EtdumpError",
    "Evidence",
    "ExportError",
    "ExportedModel",
    "GateRecord",
    "InstructionCount",
    "Interval",
    "KernelSamplingWarning",
    "KernelTime",
    "LlmProfile",
    "LlmSequence",
    "MissingBaselineWarning",
    "ModelDefinitionError",
    "OneProcessIntervalWarning",
    "Option",
    "Pair",
    "Profile",
    "ProgramError",
    "Recipe",
    "RegisteredTarget",
    "RunResult",
    "RunSpec",
    "Runner",
    "RunnerError",
    "SampleStats",
    "Sme2DeprecationWarning",
    "Sme2Error",
    "Sme2Session",
    "Sme2Warning",
    "Speedup",
    "Status",
    "StorageError",
    "Target",
    "TargetInfo",
    "TargetSettings",
    "ThreadScaling",
    "Timings",
    "Tolerances",
    "UninitialisedWeightsWarning",
    "UnknownModelError",
    "UsageError",
    "Verdict",
    "assert_delegation",
    "assert_kernel_share",
    "assert_no_modelled_sme2_slowdown",
    "assert_no_sme2_slowdown",
    "assert_outputs_match",
    "assert_portable_ops",
    "assert_share",
    "assert_sme2_kernel_path",
    "assert_sme2_not_slower_at_any_threads",
    "assert_speedup",
    "classify",
    "count_instructions",
    "llm_params",
    "register_model",
]
