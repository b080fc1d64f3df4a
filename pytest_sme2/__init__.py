"""pytest-sme2: performance regression tests of ExecuTorch models on Arm CPUs with and without SME2.

Public API: the names below, and ``pytest_sme2.report``'s ``__all__`` (reports of profiles made outside
pytest). Everything else is private, whatever its module's name.
"""

from .assertions import (
    assert_delegation,
    assert_kernel_share,
    assert_outputs_match,
    assert_portable_ops,
    assert_share,
    assert_sme2_kernel_path,
    assert_speedup,
)
from .categories import Category, classify
from .errors import (
    BaselineError,
    DamagedCacheEntryWarning,
    EtdumpError,
    ExportError,
    KernelSamplingWarning,
    MissingBaselineWarning,
    ModelDefinitionError,
    ProgramError,
    RunnerError,
    Sme2Error,
    Sme2Warning,
    StorageError,
    UnknownModelError,
    UsageError,
)
from .export import ExportedModel, Recipe
from .kernel_sampling import KernelTime
from .profile import Profile, Speedup
from .registry import register_model
from .runner import Runner, Timings
from .callgrind import InstructionCount, count_instructions
from .stats import Interval, Summary
from .targets import RunSpec, TargetInfo
from .verdicts import Tolerances, Verdict

from ._version import __version__ as __version__  # re-exported: the package version

__all__ = [
    "BaselineError",
    "Category",
    "DamagedCacheEntryWarning",
    "EtdumpError",
    "ExportError",
    "ExportedModel",
    "InstructionCount",
    "Interval",
    "KernelSamplingWarning",
    "KernelTime",
    "MissingBaselineWarning",
    "ModelDefinitionError",
    "Profile",
    "ProgramError",
    "Recipe",
    "RunSpec",
    "Runner",
    "RunnerError",
    "Sme2Error",
    "Sme2Warning",
    "Speedup",
    "StorageError",
    "Summary",
    "TargetInfo",
    "Timings",
    "Tolerances",
    "UnknownModelError",
    "UsageError",
    "Verdict",
    "assert_delegation",
    "assert_kernel_share",
    "assert_outputs_match",
    "assert_portable_ops",
    "assert_share",
    "assert_sme2_kernel_path",
    "assert_speedup",
    "classify",
    "count_instructions",
    "register_model",
]
