"""The one list of pytest-sme2's renamed Python names still accepted in their old spelling, and their warning.

Why one list: a rename must not break what users wrote, and the old spellings must not spread again. Each
old name that still works is declared here (the option and ini spellings in the option table, through
``Option.renamed_from``), warns with the name to use instead, and is the only place a retired word of the
glossary (docs/design.md, "Names") may appear in the public API: tests/test_glossary.py checks both.
"""

from __future__ import annotations

import warnings
from typing import Any

from pytest_sme2.errors import Sme2DeprecationWarning

# Old spelling -> the one to use instead (issue 67: "process" in the gate's sense is a *replica*; a top-up
# is an *extra round*).
RENAMED: dict[str, str] = {
    "RunSpec(processes=)": "RunSpec(replicas=)",
    "RunSpec.processes": "RunSpec.replicas",
    "Profile.process_sizes": "Profile.replica_sizes",
    "Runner.profile(top_up=)": "Runner.profile(extra_rounds=)",
    "Speedup.this_processes": "Speedup.this_chunks",
    "Speedup.other_processes": "Speedup.other_chunks",
}


def warn_renamed(old: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` (a key of RENAMED) was used; it still works. ``stacklevel`` 3: the caller's caller,
    the user's line."""
    warnings.warn(
        Sme2DeprecationWarning(f"{old} is deprecated: use {RENAMED[old]} (same meaning; the old spelling still works)"),
        stacklevel=stacklevel,
    )


def renamed_attribute(old: str, new: str) -> Any:
    """A read-only property that reads attribute ``new`` under the earlier name ``old`` (a key of RENAMED, e.g.
    ``"RunSpec.processes"``), with the warning: ``processes = renamed_attribute("RunSpec.processes", "replicas")``
    in the class body. A property, not a field, so ``dataclasses`` never sees the old name."""

    def read(self: Any) -> Any:
        warn_renamed(old)
        return getattr(self, new)

    read.__doc__ = f"The earlier spelling of ``{new}`` (system/deprecated.py): still read, with a warning."
    return property(read)


def renamed_setting(old: str, new: str) -> str:
    """The warning's text for a setting given in its old spelling (an option or ini key of the option table)."""
    return f"{old} is deprecated: use {new} (same meaning; the old spelling still works)"


__all__ = ["RENAMED", "renamed_attribute", "renamed_setting", "warn_renamed"]
