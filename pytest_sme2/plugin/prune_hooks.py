"""pytest hooks that keep ``.sme2/`` within its bound at the end of every session (measure/prune.py).

Why at the end of a session: the bound (``sme2_max_size``, ``sme2_keep_sessions``) then holds without anyone
running ``pytest-sme2 cache prune``. Only the controller prunes under xdist (its workers share its session folder
and end before it), after every test, so nothing a test still needs can go; this session's folder, running
sessions' folders and whatever was used since this session started are kept (measure/prune.py says why). One
line says what went; a prune that cannot run (a cache folder holding other things) says why and fails nothing:
the tests' results stand.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_sme2.errors import Sme2Error
from pytest_sme2.measure import prune

_BOUND_KEY = pytest.StashKey[prune.Bound]()
_STARTED_KEY = pytest.StashKey[float]()
_LINE_KEY = pytest.StashKey[str]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The bound, read and checked now: a bad size is a usage error before any test, not a note at the end."""
    from pytest_sme2.plugin import setting

    config.stash[_STARTED_KEY] = time.time()
    config.stash[_BOUND_KEY] = prune.Bound(
        max_bytes=setting(config, "max_size") or 0, keep_sessions=setting(config, "keep_sessions") or 0
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    bound = config.stash.get(_BOUND_KEY, None)
    if _is_worker(config) or bound is None or not (bound.max_bytes or bound.keep_sessions):
        return
    from pytest_sme2.plugin import options, session_of

    sme2 = session_of(config)
    if sme2 is None:
        return
    cache, artifacts = sme2.settings.cache_dir, sme2.settings.session_dir.parent
    folders = prune.Folders(
        cache if cache.is_dir() else None,
        artifacts if artifacts.is_dir() else None,
        options.required_path(config, "baselines_dir"),
    )
    if folders.cache is None and folders.artifacts is None:
        return
    try:
        outcome = prune.prune(
            folders, bound, current=sme2.settings.session_dir, running_since=config.stash[_STARTED_KEY]
        )
    except (Sme2Error, OSError) as exc:
        config.stash[_LINE_KEY] = (
            f"sme2: the cache and session folders were not kept within their bound: {exc} (ini sme2_max_size = 0 "
            "and sme2_keep_sessions = 0 turn the bound off)"
        )
        return
    if outcome.removed:
        config.stash[_LINE_KEY] = summary_line(outcome, bound)


def summary_line(outcome: prune.Outcome, bound: prune.Bound) -> str:
    """The one line a session that pruned prints: what went, what is left, and the bound."""
    kinds: dict[str, int] = {}
    for item, _ in outcome.removed:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    went = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in kinds.items())
    limits = ", ".join(
        part
        for part in (
            f"sme2_max_size {prune.shown(bound.max_bytes)}" if bound.max_bytes else "",
            f"sme2_keep_sessions {bound.keep_sessions}" if bound.keep_sessions else "",
        )
        if part
    )
    above = "; still above sme2_max_size: the rest is in use" if outcome.after > bound.max_bytes > 0 else ""
    return (
        f"sme2: removed {went} ({prune.shown(outcome.freed)}) to keep the cache and session folders within "
        f"{limits}; they hold {prune.shown(outcome.after)}{above}"
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from pytest_sme2.system.plain_text import CommandFreeWriter

    line = terminalreporter.config.stash.get(_LINE_KEY, None)
    if line:  # it names folders, whose names are anyone's: no CI workflow command gets through
        CommandFreeWriter(terminalreporter).write_line(line)
