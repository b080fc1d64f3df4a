"""The estimate before a counted run (count_estimate.py) and the records it starts from (count_records.py): the
arithmetic on synthetic programs, the reader on forged records, and on a real program under the real emulator
a refused run that never starts, a record written by a counted run and the next run's estimate from it."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import REPO
from pytest_sme2 import Recipe
from pytest_sme2.errors import UsageError
from pytest_sme2.export.work import OpWork, ProgramWork
from pytest_sme2.measure.count_estimate import RATE_ELSEWHERE_TEXT, CountHistory, estimate, known_macs
from pytest_sme2.measure.count_records import (
    RECORDS_FOLDER,
    CountRecord,
    read_records,
    record_path,
    this_machine,
    write_record,
)
from pytest_sme2.measure.runner import Runner
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run import emulation_setup
from pytest_sme2.run.targets import RunSpec

STATUS = emulation_setup.status()


def _work(macs: float) -> ProgramWork:
    """A program of one delegated GEMM of ``macs`` and one portable operator of unknown work."""
    return ProgramWork("x.pte", {0: [("XNNFullyConnected", OpWork(macs=macs))]}, {1: OpWork(why_unknown="?")})


def _record(**changes: object) -> CountRecord:
    base = CountRecord("m", "fp32-xnnpack", "emulated sme2=on threads=1", True, 10**9, 2, 1e9, 10.0, "cpu x2", "then")
    return replace(base, **changes)  # type: ignore[arg-type]


def test_work_of_unknown_operators_is_left_out_of_the_macs() -> None:
    assert known_macs(_work(5e8)) == 5e8


def test_a_modelled_estimate_grows_with_the_work_and_says_it_is_modelled() -> None:
    small = estimate(_work(1e8), 10**6, "fp32-xnnpack", True, 2, CountHistory(None, [], "cpu x2"))
    large = estimate(_work(1e11), 10**6, "fp32-xnnpack", True, 2, CountHistory(None, [], "cpu x2"))
    for e in (small, large):
        low, typical, high = e.instructions
        assert 0 < low < typical < high and e.seconds[0] < e.seconds[1] < e.seconds[2]
        assert "modelled from its work" in e.basis and e.rate_basis == RATE_ELSEWHERE_TEXT
    assert large.instructions[1] > 100 * small.instructions[1]
    off = estimate(_work(1e11), 10**6, "fp32-xnnpack", False, 2, CountHistory(None, [], "cpu x2"))
    assert off.instructions[0] > large.instructions[0]  # without SME2 a MAC costs more instructions
    line = large.line()
    assert "emulated seconds are the emulator's cost, not the program's time" in line and "GMAC" in line


def test_the_last_count_of_the_same_model_is_scaled_by_its_work_and_inferences() -> None:
    then = _record(instructions=3 * 10**9, inferences=2, macs=1e9)
    now = estimate(_work(2e9), 10**6, "fp32-xnnpack", True, 5, CountHistory(then, [then], "cpu x2"))
    # twice the work, (5 + 1) / (2 + 1) the inferences (a load counts about one)
    assert now.instructions[1] == pytest.approx(3e9 * 2 * 6 / 3)
    assert now.instructions[0] < now.instructions[1] < now.instructions[2]
    assert "the last count of this model here" in now.basis and "2.00x" in now.basis
    # seconds at that run's own rate (300 M a second) on this machine
    assert now.seconds[1] == pytest.approx(now.instructions[1] / 3e8)
    assert "1 earlier counted run on this machine" in now.rate_basis


def test_neither_a_slow_machine_nor_a_forged_record_makes_a_refusal_likelier() -> None:
    """The refusal's bound is the MACs at the most one instruction can do, at the fastest rate measured
    anywhere: however slow this machine's runs were or however many instructions a record claims, a refusal
    never stops a run that would have finished."""
    slow = _record(model="other", instructions=10**9, seconds=100.0)  # 10 M a second
    forged = _record(instructions=10**15)  # this model, a petainstruction
    plain = estimate(_work(1e11), 10**6, "fp32-xnnpack", False, 2, CountHistory(None, [], "cpu x2"))
    for other in (
        estimate(_work(1e11), 10**6, "fp32-xnnpack", False, 2, CountHistory(None, [slow], "cpu x2")),
        estimate(_work(1e11), 10**6, "fp32-xnnpack", False, 2, CountHistory(forged, [forged], "cpu x2")),
    ):
        assert other.floor_seconds == plain.floor_seconds and other.seconds[1] > plain.seconds[1]
        assert other.refusal(600, "x") is None and other.warning(600) is not None
    # 2e11 MACs at 64 a SVE instruction (SVL 2048) at 300 M instructions a second: about 10 s, whatever the table
    assert 5 < plain.floor_seconds < 20


def test_rates_of_another_machine_are_not_this_machines() -> None:
    elsewhere = _record(machine="other cpu x64")
    got = estimate(_work(1e9), 10**6, "fp32-xnnpack", True, 2, CountHistory(None, [elsewhere], "cpu x2"))
    assert got.rate_basis == RATE_ELSEWHERE_TEXT


def test_a_run_that_cannot_finish_is_refused_with_its_numbers_and_the_fix() -> None:
    hopeless = estimate(_work(1e14), 10**6, "fp32-xnnpack", False, 2, CountHistory(None, [], "cpu x2"))
    refusal = hopeless.refusal(600, "@pytest.mark.perf(timeout=600)")
    assert refusal is not None
    assert "cannot finish inside its timeout of 10 min (@pytest.mark.perf(timeout=600))" in refusal
    assert re.search(r"MACs alone take at least [\d.,]+ [GMk]", refusal) and "--sme2-timeout=" in refusal
    assert hopeless.warning(600) is not None
    fits = estimate(_work(1e8), 10**6, "fp32-xnnpack", False, 2, CountHistory(None, [], "cpu x2"))
    assert fits.refusal(600, "x") is None and fits.warning(600) is None


def test_records_round_trip_and_forged_ones_are_skipped_with_their_reason(tmp_path: Path) -> None:
    good = _record()
    write_record(tmp_path, good)
    folder = tmp_path / RECORDS_FOLDER
    forged = {
        "nan.json": {
            **json.loads(record_path(tmp_path, "m", "fp32-xnnpack", good.variant).read_text()),
            "seconds": "x",
        },
        "negative.json": {"version": 1, **{**good.__dict__, "instructions": -5}},
        "bool.json": {"version": 1, **{**good.__dict__, "inferences": True}},
        "version.json": {"version": 99, **good.__dict__},
        "list.json": [1, 2],
    }
    for name, document in forged.items():
        (folder / name).write_text(json.dumps(document))
    (folder / "inf.json").write_text(json.dumps({"version": 1, **good.__dict__})[:-1] + ', "macs": Infinity}')
    (folder / "huge.json").write_bytes(b" " * (2 << 20))
    os.mkfifo(folder / "fifo.json")
    (tmp_path / "outside.json").write_text(json.dumps({"version": 1, **good.__dict__}))
    (folder / "link.json").symlink_to(tmp_path / "outside.json")
    records, skipped = read_records(tmp_path)
    assert records == [good]
    reasons = "\n".join(skipped)
    assert len(skipped) == 9, reasons
    for name, why in [
        ("nan.json", "'seconds' is 'x'"),
        ("negative.json", "not a finite number of at least 0"),
        ("bool.json", "'inferences' is True"),
        ("version.json", "not a version-1 record"),
        ("inf.json", "'macs' is inf"),
        ("huge.json", "above the 1 MiB"),
        ("fifo.json", "FIFO"),
        ("link.json", "out of"),
    ]:
        assert re.search(rf"{re.escape(name)} is skipped: .*{re.escape(why)}", reasons), (name, reasons)


needs_plugin = pytest.mark.skipif(
    not STATUS.ready or STATUS.plugin_header is None, reason="needs the plugin-capable qemu (make emulation)"
)


@needs_plugin
def test_a_counted_run_leaves_a_record_the_next_estimate_uses_and_a_hopeless_one_never_starts(
    tmp_path: Path, shared_export_cache: Path
) -> None:
    """Real toy_cnn, real qemu: the first count is modelled from the program's work, the second (emulated again)
    from the first's record; a timeout no run can meet is refused before qemu starts (no run folder)."""
    cache = tmp_path / "cache"
    (cache).mkdir()
    said: list[str] = []

    def session() -> Sme2Session:
        s = Sme2Session(
            Settings(target="emulated", cache_dir=cache, session_dir=tmp_path / "s", target_options={"fresh": True})
        )
        s.registry.register_dir(REPO / "models")
        s.say = said.append
        return s

    first = session()
    exported = Sme2Session(Settings(target="emulated", cache_dir=shared_export_cache, session_dir=tmp_path / "e"))
    exported.registry.register_dir(REPO / "models")
    pte = exported.export("toy_cnn", Recipe())
    spec = RunSpec(sme2=True, runs=1, warmup=1)
    Runner(first, spec, first.test_dir("one")).profile(pte)
    (before,) = [s for s in said if "expect about" in s]
    assert "modelled from its work" in before and "not the program's time" in before
    records, skipped = read_records(cache)
    assert skipped == [] and len(records) == 1
    record = records[0]
    assert record.model == "toy_cnn" and record.machine == this_machine() and record.sme2 is True
    assert record.instructions > 1_000_000 and record.seconds > 0 and record.inferences == 2

    said.clear()
    second = session()
    Runner(second, spec, second.test_dir("two")).profile(pte)
    (again,) = [s for s in said if "expect about" in s]
    assert "the last count of this model here" in again
    assert RATE_ELSEWHERE_TEXT in again  # a toy run's few M instructions are mostly qemu's start-up: no rate
    assert f"{record.instructions / 1e6:,.1f} M" in again  # the record's own count, as the record says it
    (recount,) = [r for r in read_records(cache)[0] if r.model == "toy_cnn"]
    assert 0.99 < recount.instructions / record.instructions < 1.01  # counted runs repeat

    third = session()
    hopeless = Runner(third, RunSpec(sme2=True, runs=1, warmup=1, timeout_s=1e-6), third.test_dir("three"))
    with pytest.raises(UsageError, match=r"cannot finish inside its timeout .* MACs alone take at least"):
        hopeless.profile(pte)
    started = [p for p in third.test_dir("three").glob("*-profile-*/**/*") if p.is_file()]
    assert started == [], f"a refused run must not start: {started}"
    assert math.isfinite(recount.seconds)

    # the same run again, now answered by the result cache the fresh runs stored into: nothing is emulated, so
    # nothing is estimated (the estimate is said where the target emulates, not before its cache lookup)
    said.clear()
    cached = Sme2Session(Settings(target="emulated", cache_dir=cache, session_dir=tmp_path / "s"))
    cached.registry.register_dir(REPO / "models")
    cached.say = said.append
    profile = Runner(cached, spec, cached.test_dir("four")).profile(pte)
    assert profile.metadata["result_cache"]["cached"] is True, profile.metadata.get("result_cache")
    assert not [s for s in said if "expect about" in s], said


@needs_plugin
def test_side_by_side_progress_counts_towards_each_variants_estimate(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare_variants runs copies of its runners side by side: each report says of how many it counts, by the
    SME2 setting it names (EfficientSAM 1024x1024 said only "N M guest instructions counted")."""
    from pytest_sme2.run import count_progress

    monkeypatch.setattr(count_progress, "_EVERY_S", 0.05)  # a toy run lasts under a second
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    sme2_project.makepyfile(
        test_pair="""
        import pytest

        @pytest.mark.model("tiny")
        def test_pair(exported_pte, runner, compare_variants):
            compare_variants(exported_pte, runner(sme2=True), runner(sme2=False))
        """
    )
    result = sme2_project.runpytest_inprocess("--sme2-target=emulated", "--sme2-no-baselines", "-v")
    result.assert_outcomes(passed=1)
    (log,) = (sme2_project.path / ".sme2" / "artifacts").glob("session-*/progress.log")
    lines = [line for line in log.read_text().splitlines() if "guest instructions counted" in line]
    assert lines, log.read_text()[-3000:]
    for line in lines:
        assert re.search(
            r"\((sme2=on|sme2=off)\): [\d,]+ M guest instructions counted of about [\d,]+ M expected", line
        )
