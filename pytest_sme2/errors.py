"""Error types. Each message names the thing that is wrong and how to fix it.

The plugin turns these into a failure or error of the one test that hit them
(``pytest.fail(..., pytrace=False)``), never into a crash of the session.
"""

from __future__ import annotations


class Sme2Error(Exception):
    """Base of every pytest-sme2 error."""


class UsageError(Sme2Error):
    """A marker, option or fixture argument has a value that cannot work."""


class UnknownModelError(Sme2Error):
    """A model name that is not registered."""


class ModelDefinitionError(Sme2Error):
    """A model module does not implement the onboarding interface."""


class ExportError(Sme2Error):
    """torch.export / lowering / quantisation of a model failed.

    The message is the cause in a few lines; ``detail`` holds the full traceback and torch's trace log,
    which the plugin keeps in the test's artifacts folder instead of printing hundreds of lines.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class ProgramError(Sme2Error):
    """A .pte file is missing, truncated or not loadable by the runtime."""


class RunnerError(Sme2Error):
    """A run failed: the runtime raised, the runner crashed or timed out."""


class EtdumpError(Sme2Error):
    """An ETDump file is missing, empty, truncated or not an ETDump."""


class BaselineError(Sme2Error):
    """A stored baseline file is unreadable, hand-broken or from an unknown schema."""


class EmulatedTimingError(Sme2Error):
    """A time was read from a profile of the emulated target, where the emulator's time is not the device's.

    Not a failure of the test: the plugin turns it into a skip of the rest of the test body, after gating the
    profiles built before it on their exact counts (plugin/baseline_hooks.py). Outside pytest it is an error
    like any other of pytest-sme2's.
    """


class StorageError(Sme2Error):
    """A folder pytest-sme2 writes into (artifacts, export cache, baselines) cannot be written."""


class Sme2Warning(UserWarning):
    """Something asked of pytest-sme2 was not done in full, while the test stands: shown even where a project
    ignores UserWarning (as many do for torch's export noise; this repository's pyproject shows it again)."""


class Sme2DeprecationWarning(Sme2Warning, DeprecationWarning):
    """A renamed option, ini key or keyword was used in its old spelling: it still works, and the message names the
    new one. Also a DeprecationWarning, so a project's ``-W error::DeprecationWarning`` catches it; an Sme2Warning,
    so a project that ignores DeprecationWarning still sees it."""


class MissingBaselineWarning(Sme2Warning):
    """A test has no stored baseline and the policy is ``sme2_baseline_missing = warn``: nothing was gated."""


class KernelSamplingWarning(Sme2Warning):
    """Kernel sampling was asked for but gave nothing for a profile: the sampler is missing, not permitted or failed.

    A warning, not an error: the profile and every verdict on it stand without kernel attribution.
    """


class UninitialisedWeightsWarning(Sme2Warning):
    """An LLM export without a checkpoint: ExecuTorch leaves some weights and buffers uninitialised."""


class DamagedCacheEntryWarning(Sme2Warning):
    """An export cache entry's files are not what its export stored (changed, truncated, missing or garbled).

    A warning, not an error: the entry is thrown away and the model exported again, so the test runs the
    right program; the message names the entry so whoever wrote into the cache can be found.
    """


class OneProcessIntervalWarning(Sme2Warning):
    """A speedup between two profiles of which one holds the runs of a single runner process: its interval
    shows run-to-run noise only, not how far the level moves between processes (several percent here), so
    a bound such as ``.low >= 2.0`` can pass or fail by which process ran (docs/history.md, "Intervals between
    variants"). ``compare_variants`` alternates the variants over processes and gives the honest interval.
    """
