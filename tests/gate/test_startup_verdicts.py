"""Issue 28 item 2 on synthetic records: load, init and peak memory judged against the baseline, each named.

Hardware records hold each runner process's load and init (the median of its warm loads), raw and relative to the
reference program's load before each, and a peak RSS per run; the emulated target's counted record holds load and
init in instructions. Expected verdicts follow from the numbers written here.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_verdicts import record

from pytest_sme2.gate.judge import judge
from pytest_sme2.gate.record import GateRecord
from pytest_sme2.gate.verdict import Tolerances


def hardware(
    init_ms: list[float],
    load_ms: list[float] | None = None,
    reference: float = 1.0,
    rss_kb: list[float] | None = None,
    runs: int = 10,
    seed: int = 0,
    reference_load: float | None = 4.0,
) -> dict:
    """A record of len(init_ms) processes (each a baseline replica or check) of ``runs`` runs each; the reference
    program's load takes ``reference_load`` ms (None: the runner had no reference program)."""
    processes = len(init_ms)
    rng = np.random.default_rng(seed)
    samples = list(2.0 * reference * (1 + 0.01 * rng.standard_normal(processes * runs)))
    base = record(samples, replicas=processes)
    base.update(
        {
            "chunk_sizes": [runs] * processes,
            "replica_sizes": [runs] * processes,
            "reference_ms": [reference * (1 + 0.005 * x) for x in rng.standard_normal(processes * runs)],
            "load_ms_per_chunk": load_ms if load_ms is not None else [1.5 * reference] * processes,
            "init_ms_per_chunk": init_ms,
        }
    )
    base["load_relative_per_chunk"], base["init_relative_per_chunk"] = (
        (None, None)
        if reference_load is None
        else ([x / reference_load for x in base["load_ms_per_chunk"]], [x / reference_load for x in init_ms])
    )
    base["memory"] = {
        "planned_bytes": 1000,
        "planned_buffers": [1000],
        "peak_rss_kb": None if rss_kb is None else [kb for kb in rss_kb for _ in range(runs)],
    }
    return base


def by_check(verdicts, check: str):  # noqa: ANN001, ANN201
    (verdict,) = [v for v in verdicts if v.check == check]
    return verdict


# ten processes, as --sme2-update-baselines records by default (sme2_baseline_replicas), 3% apart
BASELINE_INIT = [10.0, 10.4, 9.7, 10.2, 9.9, 10.1, 9.6, 10.3, 10.0, 9.8]


def test_twice_the_init_fails_naming_init_and_load_stays_ok() -> None:
    verdicts = judge("net", hardware([20.5]), hardware(BASELINE_INIT))
    init = by_check(verdicts, "init")
    assert init.status == "regression" and init.failed
    assert init.message.startswith("init (Method::init) regression: init (Method::init) +10")
    assert "relative to the reference program's load before each load" in init.message
    assert "median 20.5 ms vs baseline 10 ms" in init.message and "1 vs 10 replica(s)" in init.message
    assert by_check(verdicts, "load").status == "ok"


def test_a_load_that_regressed_with_init_is_a_note_naming_init_and_alone_it_fails() -> None:
    """Method::init nests inside Program::load_method (docs/gate.md), so doubled packing doubles both: a CI owner's
    trial read one added layer as two start-up regressions. With init regressed, the load is a note naming it;
    a load that regressed while init did not still fails."""
    baseline = hardware(BASELINE_INIT, load_ms=[x + 0.002 for x in BASELINE_INIT])
    both = judge("net", hardware([20.5], load_ms=[20.502]), baseline)
    assert by_check(both, "init").status == "regression"
    load = by_check(both, "load")
    assert load.status == "note" and not load.failed and load.evidence["explained_by"] == "init"
    assert load.message.startswith("load (Program::load_method): load (Program::load_method) +10")
    assert load.message.endswith("(it includes init (Method::init), which regressed: one cause, judged there)")
    alone = judge("net", hardware([10.0], load_ms=[20.0]), baseline)
    assert by_check(alone, "load").status == "regression" and by_check(alone, "init").status == "ok"


def test_a_slower_machine_moves_init_and_the_reference_load_alike_and_passes() -> None:
    """Init and the reference program's load both twice as long (a busier or throttled machine): no change."""
    slow = hardware([20.2], load_ms=[3.0], reference_load=8.0)
    verdicts = judge("net", slow, hardware(BASELINE_INIT))
    assert by_check(verdicts, "init").status == "ok" and by_check(verdicts, "load").status == "ok"
    assert "median 20.2 ms vs baseline 10 ms" in by_check(verdicts, "init").message  # raw values shown
    # neither side with reference loads (--sme2-latency-reference=off): the same numbers, raw, are named only
    raw = judge(
        "net", hardware([20.2], load_ms=[3.0], reference_load=None), hardware(BASELINE_INIT, reference_load=None)
    )
    init = by_check(raw, "init")
    assert init.status == "note" and not init.failed
    assert "raw ms: neither side has reference-program loads" in init.message
    assert "--sme2-latency-reference=off" in init.message


def test_a_baseline_without_reference_loads_is_not_compared_with_one_that_has_them() -> None:
    old = hardware(BASELINE_INIT, reference_load=None)  # one load per process, as pytest-sme2 before this kept
    init = by_check(judge("net", hardware([30.0]), old), "init")
    assert init.status == "skipped" and "record it again with --sme2-update-baselines" in init.message
    now = by_check(judge("net", hardware([30.0], reference_load=None), hardware(BASELINE_INIT)), "init")
    assert now.status == "skipped" and "no reference-program loads" in now.message


def test_init_within_the_spread_of_processes_is_not_a_regression() -> None:
    spread = [10.0, 14.0, 7.0, 12.0, 8.0, 15.0, 6.5, 11.0, 9.0, 13.0]  # processes that differ by about 30%
    init = by_check(judge("net", hardware([16.0]), hardware(spread)), "init")
    assert init.status == "ok" and "not significant" in init.message


def test_peak_memory_growth_fails_naming_it_and_disturbed_runs_are_left_out() -> None:
    baseline = hardware(
        BASELINE_INIT, rss_kb=[100_000, 100_400, 99_800, 100_200, 99_900, 100_100, 99_700, 100_300, 100_000, 99_950]
    )
    grown = hardware([10.1], rss_kb=[131_000])
    peak = by_check(judge("net", grown, baseline), "peak_rss")
    assert peak.status == "regression" and "peak resident memory (the runner's, per run) +31" in peak.message
    assert peak.evidence["current"] == 131_000
    same = hardware([10.1], rss_kb=[100_100])
    # one disturbed run with a huge peak does not count
    same["memory"]["peak_rss_kb"][3] = 400_000
    same["disturbed_run_indices"], same["disturbed_runs"] = [3], 1
    assert by_check(judge("net", same, baseline), "peak_rss").status == "ok"


def test_a_baseline_recorded_before_start_up_was_kept_says_how_to_record_it() -> None:
    old = hardware(BASELINE_INIT)
    for key in ("load_ms_per_chunk", "init_ms_per_chunk", "chunk_sizes"):
        old.pop(key)
    old["memory"].pop("peak_rss_kb")
    verdicts = judge("net", hardware([10.0], rss_kb=[100_000]), old)
    for check in ("load", "init", "peak_rss"):
        assert by_check(verdicts, check).status == "skipped"
    assert "--sme2-update-baselines" in by_check(verdicts, "init").message


def test_the_host_target_has_no_start_up_to_compare_and_is_not_told_to_record_again() -> None:
    """A CI owner's trial: every host-target test's load and init said "record it again ... on the local or adb
    target" although its baseline was recorded on host as intended; neither side has start-up values there."""
    host_now, host_then = hardware(BASELINE_INIT), hardware(BASELINE_INIT)
    for rec in (host_now, host_then):
        for key in ("load_ms_per_chunk", "init_ms_per_chunk"):
            rec.pop(key)
    verdicts = judge("net", host_now, host_then)
    for check in ("load", "init"):
        verdict = by_check(verdicts, check)
        assert verdict.status == "skipped" and "not timed on this target" in verdict.message
        assert "--sme2-update-baselines" not in verdict.message


def test_tolerances_come_from_the_marker() -> None:
    verdicts = judge("net", hardware([12.2]), hardware(BASELINE_INIT), Tolerances(init=0.10))
    assert by_check(verdicts, "init").status == "regression"  # beyond the marker's 10%
    assert by_check(judge("net", hardware([12.2]), hardware(BASELINE_INIT)), "init").status == "ok"  # 0.25


def counted(load: int, init: int) -> dict:
    return {
        "emulated": True,
        "instructions": {
            "source": "qemu (emulated target)",
            "per_inference": 1_000_000,
            "sme_per_inference": 0,
            "shares": {},
            "delegation_coverage": 1.0,
            "sme_path_share": None,
            "load": load,
            "init": init,
            "ops": {},
            "sme_kernels": [],
        },
    }


@pytest.mark.parametrize(
    ("init", "status"), [(1_016_640, "ok"), (1_300_000, "ok"), (1_500_000, "regression"), (550_000, "improvement")]
)
def test_counted_init_on_the_emulated_target_is_exact(init: int, status: str) -> None:
    verdicts = judge("toy", counted(1_028_292 - 1_016_640 + init, init), counted(1_028_292, 1_016_640))
    verdict = by_check(verdicts, "init")
    assert verdict.status == status
    assert f"init (Method::init) 1,016,640 -> {init:,} instructions" in verdict.message
    assert not {"peak_rss"} & {v.check for v in verdicts}  # qemu's memory is not the runner's: never judged
    # the load counts init's instructions too: with init regressed it is a note naming init, not a second failure
    assert by_check(verdicts, "load").status == ("note" if status == "regression" else status)


def test_the_failing_message_names_init_with_its_change() -> None:
    from pytest_sme2.gate.findings import findings, message_lines

    grown = hardware([20.5], rss_kb=[131_000])
    baseline = hardware(
        BASELINE_INIT, rss_kb=[100_000, 100_400, 99_800, 100_200, 99_900, 100_100, 99_700, 100_300, 100_000, 99_950]
    )
    lines = message_lines(findings(judge("net", grown, baseline)))
    assert any("peak resident memory +31" in line for line in lines), lines
    assert any("init (Method::init) +10" in line and not line.strip().startswith("note: ") for line in lines), lines
    # without reference loads: a note, shown as context when something else fails (here peak memory, gated)
    raw = judge(
        "net",
        hardware([20.5], rss_kb=[131_000], reference_load=None),
        hardware(BASELINE_INIT, rss_kb=[100_000] * 10, reference_load=None),
    )
    raw_lines = message_lines(findings(raw))
    assert any(
        line.strip().startswith("note: ") and "init (Method::init) beyond its tolerance" in line for line in raw_lines
    ), raw_lines
    counted_lines = message_lines(findings(judge("toy", counted(1_600_000, 1_588_348), counted(1_028_292, 1_016_640))))
    assert any("init (Method::init) +56.2%" in line for line in counted_lines), counted_lines


def _etdump_profile(path, target: str, peaks=None, loads=None, inits=None, reference_loads=None):  # noqa: ANN001, ANN202
    from helpers_etdump import RunSpec as EtdumpRun
    from helpers_etdump import write_etdump

    from pytest_sme2 import Profile

    etdump = write_etdump(path, [EtdumpRun(e2e_ns=100_000)] * 2, load_ns=loads or 300_000, init_ns=inits or 200_000)
    memory = {} if peaks is None else {"peak_rss_kb": peaks}
    return Profile.from_etdump(
        etdump,
        model="m",
        recipe="r",
        variant="v",
        metadata={"target": {"name": target}, "memory": memory},
        reference_load_ms=None if reference_loads is None else np.asarray(reference_loads),
    )


def test_each_runner_process_keeps_its_start_up_and_the_host_worker_gives_none(tmp_path) -> None:  # noqa: ANN001
    """local and adb runners start a process per chunk: its load and init are that process's. The host target's
    Python worker serves several chunks and tests, warmed by them: its start-up is not judged."""
    from pytest_sme2 import Profile

    local = Profile.concat([_etdump_profile(tmp_path / f"l{i}.etdp", "local", [100, 101]) for i in range(2)])
    assert local.load_ms_per_chunk == [0.3, 0.3] and local.init_ms_per_chunk == [0.2, 0.2]
    assert local.init_relative_per_chunk is None  # no reference loads: nothing to divide by
    assert local.to_dict()["memory"]["peak_rss_kb"] == [100, 101, 100, 101]
    host = _etdump_profile(tmp_path / "h.etdp", "host")
    assert host.load_ms_per_chunk is None and host.init_ms_per_chunk is None
    assert host.load_ms == pytest.approx(0.3)  # still reported, only not gated
    init = by_check(judge("m", host.to_dict() | {"emulated": False, "samples_ms": []}, hardware(BASELINE_INIT)), "init")
    assert init.status == "skipped" and "on the host target its Python worker is reused" in init.message


def test_repeated_loads_give_the_median_of_the_warm_ones_each_relative_to_its_reference_load(tmp_path) -> None:  # noqa: ANN001
    """A runner given --startup_repeats loads the method several times, the reference program's load right before
    each: the first (cold) load is left out, disturbed ones too, and each later one divided by its own reference
    load."""
    from pytest_sme2 import Profile

    inits = [9_000_000, 2_000_000, 6_000_000, 2_200_000, 2_100_000]  # ns; the third load was preempted
    references = [10.0, 1.0, 3.0, 1.1, 4.0]  # ms: the preemption slowed its reference load too; the last alone
    first = _etdump_profile(
        tmp_path / "a.etdp", "local", loads=[x + 100_000 for x in inits], inits=inits, reference_loads=references
    )
    # stalled (6.0 ms: 3x its fastest warm load) and the reference slowed alone (4.0 before 2.1) are left out
    assert first.init_ms_per_chunk == [pytest.approx(2.1)]  # median of 2.0 and 2.2 ms
    assert first.init_relative_per_chunk == [pytest.approx(2.0)]  # 2.0/1.0 and 2.2/1.1
    assert first.load_relative_per_chunk == [pytest.approx((2.1 / 1.0 + 2.3 / 1.1) / 2)]
    second = _etdump_profile(
        tmp_path / "b.etdp", "local", loads=[500_000, 500_000], inits=[400_000, 400_000], reference_loads=[1.0, 0.5]
    )
    both = Profile.concat([first, second])
    assert both.init_relative_per_chunk == [pytest.approx(2.0), pytest.approx(0.8)]
    record = both.to_dict()
    assert record["init_relative_per_chunk"] == both.init_relative_per_chunk and record["chunk_sizes"] == [2, 2]
    short = _etdump_profile(tmp_path / "c.etdp", "local", loads=[1, 2], inits=[1, 2], reference_loads=[1.0])
    assert short.init_relative_per_chunk is None  # not one reference load per load: not divided


def test_peaks_that_do_not_cover_every_run_are_not_kept(tmp_path) -> None:  # noqa: ANN001
    from pytest_sme2 import Profile

    one = _etdump_profile(tmp_path / "one.etdp", "local", 512)  # a runner answering one number
    assert one.peak_rss_kb.tolist() == [512.0] and one.to_dict()["memory"]["peak_rss_kb"] == [512]
    mixed = Profile.concat(
        [_etdump_profile(tmp_path / "a.etdp", "local", [100, 101]), _etdump_profile(tmp_path / "b.etdp", "local")]
    )
    assert mixed.peak_rss_kb is None  # the first chunk's peaks would pass for all four runs


def test_a_process_whose_every_warm_load_was_disturbed_gives_no_start_up(tmp_path) -> None:  # noqa: ANN001
    """Stop 51's study beside another session's export and emulation: one runner process's mobilenet loads and the
    reference program's loads before them (ms, as the runner printed them), in no common rhythm. The fastest load
    (2.18 ms) followed a reference load slowed 6x alone, every other one is over 1.5x the fastest: nothing in this
    process says what the program's start-up is, so it gives none instead of a median of disturbed loads."""
    loads = [25.205, 8.581, 6.57, 6.223, 8.287, 2.181, 3.62, 6.633]
    references = [18.316, 7.784, 2.242, 1.017, 1.296, 6.332, 4.657, 6.286]
    ns = [int(x * 1e6) for x in loads]
    chaotic = _etdump_profile(tmp_path / "busy.etdp", "local", loads=ns, inits=ns, reference_loads=references)
    assert chaotic.init_ms_per_chunk == [None] and chaotic.init_relative_per_chunk == [None]
    assert chaotic.load_relative_per_chunk == [None]
    quiet = _etdump_profile(
        tmp_path / "quiet.etdp",
        "local",
        loads=[9_000_000, 2_000_000, 2_100_000],
        inits=[9_000_000, 2_000_000, 2_100_000],
        reference_loads=[5.0, 1.0, 1.0],
    )
    from pytest_sme2 import Profile
    from pytest_sme2.gate.record import GateRecord

    both = Profile.concat([chaotic, quiet])
    assert both.init_relative_per_chunk == [None, pytest.approx(2.05)]
    record = hardware([10.0, 10.0]) | {
        key: getattr(both, key)
        for key in ("load_ms_per_chunk", "init_ms_per_chunk", "load_relative_per_chunk", "init_relative_per_chunk")
    }
    assert GateRecord.problem(record, "r") is None  # a baseline may keep the None
    record["init_ms_per_chunk"] = [None, -1.0]
    assert "init_ms_per_chunk" in (GateRecord.problem(record, "r") or "")


def _with_disturbed(record: dict, processes: list[int]) -> dict:
    """``record`` with the runner processes at ``processes`` giving no start-up (every warm load disturbed)."""
    for key in ("load_ms_per_chunk", "init_ms_per_chunk", "load_relative_per_chunk", "init_relative_per_chunk"):
        record[key] = [None if i in processes else v for i, v in enumerate(record[key])]
    return record


def test_a_check_whose_every_process_was_disturbed_is_inconclusive_not_a_regression() -> None:
    """No process of the check has an undisturbed load: load and init are not judged (inconclusive, named), the
    test does not fail on them; one disturbed process of three leaves the other two judged."""
    verdicts = judge("net", _with_disturbed(hardware([30.0]), [0]), hardware(BASELINE_INIT))
    for check in ("load", "init"):
        verdict = by_check(verdicts, check)
        assert verdict.status == "inconclusive" and not verdict.failed
        assert "every warm load of every runner process of this run was disturbed" in verdict.message
        assert "run again when the machine is quieter" in verdict.message
    judged = by_check(judge("net", _with_disturbed(hardware([30.0, 20.4, 20.6]), [0]), hardware(BASELINE_INIT)), "init")
    assert judged.status == "regression" and "median 20.5 ms vs baseline 10 ms" in judged.message
    assert "2 vs 10 replica(s)" in judged.message


def test_a_baseline_whose_every_process_was_disturbed_says_to_record_it_again() -> None:
    baseline = _with_disturbed(hardware(BASELINE_INIT), list(range(len(BASELINE_INIT))))
    init = by_check(judge("net", hardware([10.1]), baseline), "init")
    assert init.status == "inconclusive" and "of the baseline was disturbed" in init.message
    assert "record the baseline again on a quieter machine" in init.message


def test_a_baseline_whose_every_process_was_disturbed_is_refused_when_written() -> None:
    """A review: such a baseline was written without a word, and every later check was inconclusive."""
    from pytest_sme2.gate.quality import baseline_quality

    disturbed = _with_disturbed(hardware(BASELINE_INIT), list(range(len(BASELINE_INIT))))
    quality, problems = baseline_quality(GateRecord.from_json(disturbed), Tolerances())
    assert any(
        "init (Method::init) has no value: every warm load of every runner process was disturbed" in p for p in problems
    )
    assert "init" in quality["unfit"] and "load" in quality["unfit"]
    _, fine = baseline_quality(GateRecord.from_json(_with_disturbed(hardware(BASELINE_INIT), [0, 1])), Tolerances())
    assert not any("has no value" in p for p in fine)  # eight processes left: judged on those
