"""A check another distribution registers through the entry point group ``pytest_sme2.checks``, as targets are: a
team's budget for the planned activation memory (an absolute limit of its own, which no baseline-relative check
gives), put on the path as a tiny installed distribution and used the ways a user would: in ``judge`` and in a
pytest session whose test it fails by name."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
from helpers_dist import install
from helpers_gate import UPDATE, _test_file

from pytest_sme2.errors import UsageError
from pytest_sme2.gate.checks import CHECKS
from pytest_sme2.gate.checks import registered as registry
from pytest_sme2.gate.judge import judge

BUDGET_MODULE = '''
import os

from pytest_sme2 import Check, Evidence, GateRecord, Pair, Status, Verdict


def _planned(record: GateRecord) -> int | None:
    return None if record.memory is None else record.memory.planned_bytes


def planned_budget(pair: Pair) -> list:
    """The planned activation memory against TEAM_PLANNED_BUDGET bytes (nothing to say without one)."""
    limit = int(os.environ.get("TEAM_PLANNED_BUDGET") or 0)
    planned = _planned(pair.current)
    if not limit or planned is None:
        return []
    status = Status.REGRESSION if planned > limit else Status.OK
    message = f"planned memory {planned:,} bytes against the team's budget of {limit:,}"
    return [Verdict("planned_budget", status, pair.label, message, Evidence({"planned": planned, "budget": limit}))]


BUDGET = Check(
    ("planned_budget",), "https://example.invalid/team#budget", counted=planned_budget, measured=planned_budget
)
'''


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Install the distribution ``sme2-team-checks`` with ``entry_points`` on this process's path and read the
    registry again; afterwards read it again without it."""

    def add(entry_points: str, source: str = BUDGET_MODULE) -> None:
        site = install(tmp_path / "site", "sme2-team-checks", "sme2_team_checks", source, entry_points)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, "sme2_team_checks", raising=False)  # another test's source, imported
        registry.registered_checks.cache_clear()

    yield add
    monkeypatch.undo()
    registry.registered_checks.cache_clear()


ENTRY = "[pytest_sme2.checks]\nplanned_budget = sme2_team_checks:BUDGET\n"
RECORD = {"memory": {"planned_bytes": 4096}, "emulated": True, "instructions": {}}


def test_a_registered_check_judges_after_pytest_sme2s_own(on_path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(ENTRY)
    checks = registry.registered_checks()
    assert checks[: len(CHECKS)] == CHECKS and checks[-1].names == ("planned_budget",)
    monkeypatch.setenv("TEAM_PLANNED_BUDGET", "1000")
    [verdict] = [v for v in judge("m[on]", RECORD, RECORD) if v.check == "planned_budget"]
    assert verdict.failed and verdict.message == "planned memory 4,096 bytes against the team's budget of 1,000"
    monkeypatch.setenv("TEAM_PLANNED_BUDGET", "8192")
    [verdict] = [v for v in judge("m[on]", RECORD, RECORD) if v.check == "planned_budget"]
    assert not verdict.failed


@pytest.mark.parametrize(
    ("entry_points", "says"),
    [
        (
            "[pytest_sme2.checks]\ntwice = sme2_team_checks:TWICE\n",
            "check 'twice' of sme2-team-checks (entry point group pytest_sme2.checks) gives verdicts named 'latency', "
            "which pytest-sme2 already gives; rename its verdicts or uninstall it",
        ),
        (
            "[pytest_sme2.checks]\ngone = sme2_team_checks:missing\n",
            "check 'gone' (sme2_team_checks:missing, entry point group pytest_sme2.checks of sme2-team-checks) cannot "
            "be loaded: AttributeError",
        ),
        (
            "[pytest_sme2.checks]\nplain = sme2_team_checks:planned_budget\n",
            "is <function planned_budget",
        ),
    ],
)
def test_a_wrong_registration_is_refused_by_name(on_path, entry_points: str, says: str) -> None:
    on_path(entry_points, BUDGET_MODULE + "\nTWICE = Check(('latency',), 'x', measured=planned_budget)\n")
    with pytest.raises(UsageError) as caught:
        registry.registered_checks()
    assert says in str(caught.value)


def test_a_registered_check_fails_a_session_by_name(on_path, sme2_project: pytest.Pytester, monkeypatch) -> None:
    """End to end: the tiny model exported and run on the host target, its baseline written, then checked in a
    pytest session in which the team's budget is below what the program plans: the test fails, naming the check."""
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the gate on, as users run it
    on_path(ENTRY)
    sme2_project.makepyfile(test_gate=_test_file())
    sme2_project.runpytest_inprocess(*UPDATE).assert_outcomes(passed=1)
    monkeypatch.setenv("TEAM_PLANNED_BUDGET", str(2**40))
    sme2_project.runpytest_inprocess().assert_outcomes(passed=1)
    monkeypatch.setenv("TEAM_PLANNED_BUDGET", "1")
    failing = sme2_project.runpytest_inprocess()
    failing.assert_outcomes(failed=1)
    assert "against the team's budget of 1" in failing.stdout.str()
