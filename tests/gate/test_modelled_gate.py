"""The gate on modelled device time (issue 26, item 5), on synthetic records with hand-computed numbers.

A counted record with ``modelled`` (baselines.modelled_record: kept with --sme2-device) is judged end to end
against the baseline's with a relative tolerance, naming the operators whose modelled time grew most; a
baseline priced by other numbers, or one without modelled time, is not judged and says how to record it.
The end-to-end test on a real model under emulation is in test_emulated_gate.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_verdicts import COUNTED_OPS, counted

from pytest_sme2.errors import UsageError
from pytest_sme2.gate.findings import findings, message_lines
from pytest_sme2.gate.judge import judge
from pytest_sme2.gate.verdict import Status, Tolerances
from pytest_sme2.profile.device_model import DEVICES_FOLDER, load_device

CONV, DWCONV, TRANSPOSE = COUNTED_OPS  # operator ids, in execution order
DIGEST = "a" * 64


def modelled(
    conv: float = 0.5, dwconv: float = 0.25, transpose: float = 0.05, outside: float = 0.0, **changes: object
) -> dict:
    """A record's ``modelled`` part: per operator ms, end to end their sum plus ``outside``."""
    ops = {CONV: conv, DWCONV: dwconv, TRANSPOSE: transpose}
    return {
        "device": "apple-m4",
        "pricing_digest": DIGEST,
        "validation": "not validated: test",
        "e2e_ms": sum(ops.values()) + outside,
        "category_ms": {"CONV": conv + dwconv},
        "ops": ops,
        **changes,
    }


def verdict_of(current: dict, baseline: dict, tolerances: Tolerances | None = None):  # noqa: ANN201
    found = [v for v in judge("m", current, baseline, tolerances) if v.check == "modelled"]
    assert len(found) == 1, found
    return found[0]


def test_modelled_time_beyond_tolerance_fails_naming_the_operator_and_its_ms_before_and_after() -> None:
    # the depthwise convolution 0.25 -> 0.35 ms: end to end 0.80 -> 0.90 ms, +12.5% (tolerance +2%)
    verdict = verdict_of(counted(modelled=modelled(dwconv=0.35)), counted(modelled=modelled()))
    assert verdict.status == Status.REGRESSION
    assert "800 us -> 900 us end to end (+12.50%); tolerance +2.0%" in verdict.message
    assert f"grew most: operator {DWCONV} 250 us -> 350 us" in verdict.message
    assert "modelled on apple-m4 (not validated: test; a model, not a measurement)" in verdict.message
    # in the failing test's message: the quantity named with its operator
    lines = message_lines(findings([verdict]))
    assert lines == [f"m: modelled time on apple-m4 +12.5%, most {DWCONV} 250 us -> 350 us"]


def test_operators_are_named_by_how_much_they_grew_at_most_three() -> None:
    now = modelled(conv=0.6, dwconv=0.26, transpose=0.09)  # +0.10, +0.01, +0.04 ms
    verdict = verdict_of(counted(modelled=now), counted(modelled=modelled()))
    assert verdict.status == Status.REGRESSION
    named = verdict.message.split("grew most: ")[1]
    assert named == (
        f"operator {CONV} 500 us -> 600 us; operator {TRANSPOSE} 50 us -> 90 us; " f"operator {DWCONV} 250 us -> 260 us"
    )


def test_a_new_operator_is_named_with_no_time_before() -> None:
    ops = {**{k: list(v) for k, v in COUNTED_OPS.items()}, "Sigmoid (NC, F32) #1 @0": [3, 5_000, 0]}
    now = modelled()
    now["ops"]["Sigmoid (NC, F32) #1 @0"] = 0.2
    now["e2e_ms"] += 0.2
    verdict = verdict_of(counted(instructions={"ops": ops}, modelled=now), counted(modelled=modelled()))
    assert verdict.status == Status.REGRESSION
    assert "grew most: new operator Sigmoid (NC, F32) #1 @0 0 -> 200 us" in verdict.message


def test_within_tolerance_passes_and_a_faster_model_is_an_improvement() -> None:
    assert (
        verdict_of(counted(modelled=modelled(dwconv=0.26)), counted(modelled=modelled())).status == Status.OK
    )  # +1.25%
    assert verdict_of(counted(modelled=modelled(conv=0.3)), counted(modelled=modelled())).status == Status.IMPROVEMENT
    # the tolerance is the baseline marker's / ini's: +12.5% passes at 20%
    assert (
        verdict_of(
            counted(modelled=modelled(dwconv=0.35)), counted(modelled=modelled()), Tolerances(modelled=0.2)
        ).status
        == Status.OK
    )


@pytest.mark.parametrize(
    "current, baseline, says",
    [
        (modelled(pricing_digest="b" * 64), modelled(), "priced by another version of apple-m4's numbers"),
        (modelled(device="my-phone"), modelled(), "priced by apple-m4's numbers, this run by my-phone's"),
        (
            modelled(),
            None,
            "the baseline has no modelled time on apple-m4; record the baseline again with "
            "--sme2-update-baselines --sme2-device apple-m4",
        ),
        (
            None,
            modelled(),
            "this session models no device (the baseline was modelled on apple-m4; set " "--sme2-device apple-m4",
        ),
        (
            None,
            modelled(device="my-ok", option="devices/my ok.toml"),
            "set --sme2-device 'devices/my ok.toml' to judge",
        ),
        ({**modelled(), "refused": "ran 4 threads", "e2e_ms": None, "ops": None}, modelled(), "ran 4 threads"),
        ({k: v for k, v in modelled().items() if k != "ops"}, modelled(), "modelled time is incomplete"),
    ],
)
def test_times_priced_by_other_numbers_or_missing_are_not_judged_and_say_why(
    current: dict | None, baseline: dict | None, says: str
) -> None:
    now = counted(modelled=current) if current is not None else counted()
    then = counted(modelled=baseline) if baseline is not None else counted()
    verdict = verdict_of(now, then)
    assert verdict.status == Status.SKIPPED
    assert says in verdict.message
    assert not any(v.failed for v in judge("m", now, then))  # the counts are unchanged: nothing fails


def test_without_modelled_time_on_either_side_there_is_no_modelled_verdict() -> None:
    assert not [v for v in judge("m", counted(), counted()) if v.check == "modelled"]


def _device_file(tmp_path: Path, name: str, edit: tuple[str, str] | None = None) -> Path:
    text = (DEVICES_FOLDER / "apple-m4.toml").read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_the_pricing_digest_follows_the_numbers_not_the_texts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = load_device("apple-m4").pricing_digest
    from pytest_sme2.profile import device_model

    monkeypatch.setattr(device_model, "PRICING_METHOD", device_model.PRICING_METHOD + 1)
    assert load_device("apple-m4").pricing_digest != shipped  # other equations: not compared
    monkeypatch.undo()
    assert load_device(_device_file(tmp_path, "same")).pricing_digest == shipped
    reworded = _device_file(tmp_path, "reworded", ('validation = "', 'validation = "reworded; '))
    assert load_device(reworded).pricing_digest == shipped
    faster = _device_file(tmp_path, "faster", ("l2_load_gb_per_s = 425.8", "l2_load_gb_per_s = 430.0"))
    # a copy that prices differently under the shipped name is refused (a model author's trial: every label
    # then called it apple-m4); named its own, its digest is another
    with pytest.raises(
        UsageError,
        match="name = 'apple-m4' is a shipped device's name, and this file prices "
        "differently: give it a name of its own",
    ):
        load_device(faster)
    faster.write_text(faster.read_text().replace('name = "apple-m4"', 'name = "faster-m4"', 1))
    assert load_device(faster).pricing_digest != shipped


def test_an_update_without_a_device_keeps_a_file_whose_counts_did_not_move_modelled_time_and_all(
    tmp_path: Path,
) -> None:
    """Modelled time is a function of the counts: an update that models no device leaves a file whose counts are
    unchanged as it is (its modelled time stays true); one whose counts moved is written without it, and says so
    (the end-to-end test on a real model is in test_emulated_gate.py)."""
    from pytest_sme2.gate import baselines, gate
    from pytest_sme2.gate.record import GateRecord

    path = tmp_path / "b.json"
    stored = baselines.Baseline(path, "t.py::t", "fp", {"m": GateRecord.from_json(counted(modelled=modelled()))}, {})
    baselines.write(stored)
    plain = baselines.Baseline(path, "t.py::t", "fp", {"m": GateRecord.from_json(counted())}, {})
    assert gate._unchanged(path, plain)
    assert gate._modelled_not_kept(path, {"m": GateRecord.from_json(counted())}).startswith(
        "its modelled device time was not kept on apple-m4: this update modelled no device"
    )
    assert gate._modelled_not_kept(path, {"m": GateRecord.from_json(counted(modelled=modelled()))}) == ""
    moved = baselines.Baseline(
        path, "t.py::t", "fp", {"m": GateRecord.from_json(counted(instructions={"per_inference": 2_000_000}))}, {}
    )
    assert not gate._unchanged(path, moved)


def test_a_change_spread_over_many_operators_still_names_the_ones_that_grew() -> None:
    """A review: 200 operators each 1.00 -> 1.05 ms failed (+5%) naming none, each being under 1% of the growth."""
    from pytest_sme2.gate.checks.modelled import modelled_verdicts
    from pytest_sme2.gate.record import GateRecord

    ids = [f"Convolution (NHWC, F32) IGEMM #{i} @0" for i in range(1, 201)]

    def side(ms: float) -> dict:
        return {
            "instructions": {"ops": {op: [1000, 0] for op in ids}},
            "modelled": {
                "device": "apple-m4",
                "pricing_digest": DIGEST,
                "validation": "v",
                "e2e_ms": ms * len(ids),
                "ops": {op: ms for op in ids},
            },
        }

    [verdict] = modelled_verdicts("m", GateRecord.from_json(side(1.05)), GateRecord.from_json(side(1.0)), Tolerances())
    assert verdict.status == Status.REGRESSION
    assert verdict.message.count("-> 1.05 ms") == 3  # the three named, each 1 ms -> 1.05 ms
