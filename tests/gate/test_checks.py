"""The gate's checks behind one interface, and verdicts typed from the check to the report.

The registry is the one list of check names; each check's docs exist and name its verdicts; a verdict crosses
processes as plain data and comes back equal; nothing downstream reads a verdict's text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.errors import UsageError
from pytest_sme2.gate.checks import CHECK_NAMES, CHECKS, Check, Pair
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Evidence, Kind, Status, Tolerances, Verdict

REPO = Path(__file__).resolve().parents[2]


def _slug(text: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _sections(page: str) -> set[str]:
    """The anchors a check's docs may point at: headings, and the bold leads of bullets."""
    headings = re.findall(r"^#+ (.+)$", page, re.MULTILINE)
    leads = re.findall(r"^- \*\*([^*]+?)\.?\*\*", page, re.MULTILINE)
    return {_slug(text) for text in headings + leads}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.names[0])
def test_each_check_is_documented_where_it_says(check: Check) -> None:
    page, _, section = check.docs.partition("#")
    path = REPO / page
    assert path.is_file(), f"{check.names[0]}: its docs page {page} does not exist"
    text = path.read_text()
    assert not section or section in _sections(text), f"{check.names[0]}: {page} has no section {section!r}"
    missing = [name for name in check.names if f"`{name}`" not in text]
    assert not missing, f"{page} does not name the verdicts {missing} of check {check.names[0]!r} in backticks"


def test_the_registry_is_the_one_list_of_check_names() -> None:
    assert len(CHECK_NAMES) == len(set(CHECK_NAMES))
    assert set(CHECK_NAMES) == {name for check in CHECKS for name in check.names}
    # every check applies to at least one kind of record
    assert all(check.counted is not None or check.measured is not None for check in CHECKS)


def test_a_verdict_under_a_name_its_check_did_not_declare_is_refused() -> None:
    rogue = Check(("energy",), "docs/gate.md", measured=lambda pair: [Verdict("power", Status.OK, pair.label, "")])
    record = GateRecord(samples_ms=[1.0])
    pair = Pair("m", record, record, Tolerances())
    with pytest.raises(TypeError, match="'power'"):
        rogue.judge(pair)
    emulated = GateRecord(emulated=True)
    assert rogue.judge(Pair("m", emulated, emulated, Tolerances())) == []  # no counted function


def test_a_verdict_crosses_processes_as_plain_data_and_comes_back_equal() -> None:
    verdict = Verdict(
        "share",
        Status.REGRESSION,
        "m fp32",
        "share of CONV 50.0% -> 62.0%",
        Evidence(
            {"current": np.float64(0.62), "baseline": 0.5, "runs": np.int64(40), "interval": (np.float64(0.1), 0.14)},
            Kind.QUANTITY,
            "CONV",
            True,
            "share of CONV 50.0% -> 62.0%",
        ),
    )
    data = verdict.as_dict()
    text = json.dumps(data)  # plain: no numpy scalar, no enum, no tuple left
    assert type(data["evidence"]["numbers"]["current"]) is float and type(data["evidence"]["numbers"]["runs"]) is int
    assert data["status"] == "regression" and type(data["status"]) is str
    back = Verdict.from_dict(json.loads(text))
    assert back.status is Status.REGRESSION and back.evidence.category == "CONV" and back.evidence.statistical
    assert back.evidence.short == verdict.evidence.short and back.evidence["interval"] == [0.1, 0.14]
    assert str(back) == "[regression] m fp32: share of CONV 50.0% -> 62.0%" == str(verdict)


def test_a_damaged_verdict_is_refused_by_name() -> None:
    data = Verdict("latency", Status.OK, "m", "fine").as_dict()
    with pytest.raises(UsageError, match="stored verdict"):
        Verdict.from_dict({**data, "status": "passed"})
    with pytest.raises(UsageError, match="check"):
        Verdict.from_dict({k: v for k, v in data.items() if k != "check"})
    with pytest.raises(ValueError, match="'fine'"):
        Verdict("latency", "fine", "m", "a word that is no status")  # type: ignore[arg-type]


def test_statuses_are_the_words_the_gate_writes() -> None:
    assert [s.value for s in Status] == [
        "ok",
        "regression",
        "improvement",
        "skipped",
        "inconclusive",
        "note",
        "missing",
    ]
    assert {s for s in Status if s.failed} == {Status.REGRESSION, Status.MISSING}
    assert f"[{Status.INCONCLUSIVE}]" == "[inconclusive]" and str(Status.NOTE) == "note"
    assert Status.OK == "ok"


def test_the_terminal_reads_a_verdicts_status_not_its_words() -> None:
    """A message that reads like another status ("[improvement] ...") is counted by its own status."""
    from pytest_sme2.report.entries import verdicts_of

    tricky = Verdict("latency", Status.OK, "m", "within tolerance; was [improvement] once").as_dict()
    unclear = Verdict("latency", Status.INCONCLUSIVE, "m", "latency not judged").as_dict()
    outcome = {
        "verdicts": [tricky, unclear],
        "failed": [],
        "notes": [],
        "missing": [],
        "written": [],
        "unchanged": [],
        "findings": [],
    }
    rows = verdicts_of([("sme2_baseline", outcome)])
    assert [row["verdict"] for row in rows] == ["ok", "inconclusive"]
    assert rows[0]["message"] == "[ok] m: within tolerance; was [improvement] once"


def test_findings_group_by_kind_and_show_the_checks_own_words() -> None:
    from pytest_sme2.gate import findings

    grown = Verdict(
        "init",
        Status.REGRESSION,
        "net",
        "init (Method::init) regression: +40.0% (...)",
        Evidence({"ratio": 1.4}, short="init (Method::init) +40.0%"),
    )
    gone = Verdict(
        "op_instructions",
        Status.NOTE,
        "net",
        "the program's operators changed (gone: x)",
        Evidence({"gone": ["x"], "new": []}, Kind.OPERATORS),
    )
    lost = Verdict(
        "sme_path",
        Status.REGRESSION,
        "net",
        "SME/SME2 kernel(s) executed in the baseline but not now: k",
        Evidence({"lost": ["k"]}, Kind.KERNEL_PATH),
    )
    found = findings.findings([grown, gone, lost])
    assert [f.cause_name for f in found] == ["operators", "SME path", "quantity"]
    assert found[-1].text == "init (Method::init) +40.0%"
