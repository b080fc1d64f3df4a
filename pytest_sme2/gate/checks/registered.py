"""The checks that judge: pytest-sme2's own (gate/checks/__init__.py, ``CHECKS``), then those other distributions
register in the entry point group ``pytest_sme2.checks``, as targets are registered (run/targets/registry.py).

An entry point's value is a ``Check`` (gate/checks/base.py): its verdict names, where its docs are (a page or
address of the distribution's own) and a function per kind of record it judges, given a ``Pair`` of typed records
(``GateRecord``, gate/record.py). Third-party checks come after the shipped ones, ordered by entry point name:
installers write entry points in an order of their own. A verdict name another check already gives, an object that
is not a Check, or one that cannot be loaded is a UsageError naming the distribution and the fix.
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import Any

from pytest_sme2.errors import UsageError
from pytest_sme2.gate.checks import CHECKS, Check
from pytest_sme2.system.entry_points import distribution_of, load

GROUP = "pytest_sme2.checks"


def _load(entry: metadata.EntryPoint) -> Check:
    where = f"check {entry.name!r} ({entry.value}, entry point group {GROUP} of {distribution_of(entry)})"
    loaded: Any = load(entry, where)
    if not isinstance(loaded, Check):
        raise UsageError(f"{where} is {loaded!r}, not a pytest_sme2.Check; register a Check instance")
    if not loaded.names or (loaded.counted is None and loaded.measured is None):
        raise UsageError(f"{where} gives no verdict names or judges no kind of record (counted=, measured=)")
    return loaded


@functools.lru_cache(maxsize=None)
def registered_checks() -> tuple[Check, ...]:
    """Every check in the order its verdicts are listed: pytest-sme2's own, then the registered ones by name."""
    given = {name: "pytest-sme2" for check in CHECKS for name in check.names}
    out = list(CHECKS)
    for entry in sorted(metadata.entry_points(group=GROUP), key=lambda entry: entry.name):
        check = _load(entry)
        for name in check.names:
            if name in given:
                raise UsageError(
                    f"check {entry.name!r} of {distribution_of(entry)} (entry point group {GROUP}) gives verdicts "
                    f"named {name!r}, which {given[name]} already gives; rename its verdicts or uninstall it"
                )
            given[name] = distribution_of(entry)
        out.append(check)
    return tuple(out)
