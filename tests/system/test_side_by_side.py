"""system/side_by_side.py: measurements made at once where the target allows, answers in order, nothing cut
short by another's failure; and compare_variants on the emulated target counting SME2 on and off at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pytest_sme2.system.side_by_side import cores_for_side_by_side, side_by_side


def test_calls_run_at_once_and_answer_in_order() -> None:
    meet = threading.Barrier(3, timeout=10)  # only three calls running at the same time get past it

    def call(answer: int) -> int:
        meet.wait()
        return answer

    assert side_by_side([lambda: call(1), lambda: call(2), lambda: call(3)], at_once=3) == [1, 2, 3]


def test_one_at_a_time_never_overlaps() -> None:
    running, most = [0], [0]
    lock = threading.Lock()

    def call(answer: str) -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return answer

    assert side_by_side([lambda: call("a"), lambda: call("b"), lambda: call("c")], at_once=1) == ["a", "b", "c"]
    assert most[0] == 1
    most[0] = 0
    assert side_by_side([lambda: call("a"), lambda: call("b"), lambda: call("c")], at_once=2) == ["a", "b", "c"]
    assert most[0] == 2


def test_a_failure_lets_the_others_finish_and_the_first_in_order_is_raised() -> None:
    finished: list[str] = []

    def slow() -> str:
        time.sleep(0.2)
        finished.append("slow")
        return "slow"

    def fails(what: str) -> str:
        raise ValueError(what)

    with pytest.raises(ValueError, match="first"):
        side_by_side([lambda: fails("first"), slow, lambda: fails("second")], at_once=3)
    assert finished == ["slow"]


def test_cores_are_shared_out_among_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert cores_for_side_by_side() == 4
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert cores_for_side_by_side() == 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    assert cores_for_side_by_side() == 1


def test_emulated_compare_variants_counts_on_and_off_at_once_with_the_counts_of_one_at_a_time(
    tmp_path: Path, exported_toy_cnn
) -> None:
    """A real counted pair on the emulated target: the two runner processes overlap in time, and each side's
    counts equal those of the same side counted alone (no result cache: both ways count afresh)."""
    from pytest_sme2.measure.runner import Runner, alternate
    from pytest_sme2.measure.session import Settings, Sme2Session
    from pytest_sme2.run import emulation_setup
    from pytest_sme2.run.targets import RunSpec

    status = emulation_setup.status()
    if not status.ready:
        pytest.skip(f"emulated target not ready: {status.problem}")
    session = Sme2Session(
        Settings(
            target="emulated",
            cache_dir=tmp_path / "cache",
            session_dir=tmp_path / "artifacts",
            target_options={"fresh": True},
        )
    )
    spans: list[tuple[float, float]] = []
    target = session.target
    real_run = target.run

    def timed_run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the real run, its span recorded
        started = time.monotonic()
        try:
            return real_run(*args, **kwargs)
        finally:
            spans.append((started, time.monotonic()))

    try:
        if target.side_by_side < 2:
            pytest.skip("one core here: nothing to run beside")
        target.run = timed_run  # type: ignore[method-assign]
        spec = RunSpec(runs=1, warmup=0, max_rounds=1)
        on = Runner(session, RunSpec(**{**spec.as_dict(), "sme2": True}), session.test_dir("pair"))
        off = Runner(session, RunSpec(**{**spec.as_dict(), "sme2": False}), session.test_dir("pair"))
        pair = alternate(exported_toy_cnn, on, off)
        assert len(spans) == 2
        (a_start, a_end), (b_start, b_end) = sorted(spans)
        assert b_start < a_end, f"the two counted runs did not overlap: {spans}"
        alone = [
            Runner(session, runner.spec, session.test_dir(f"alone-{i}")).profile(exported_toy_cnn)
            for i, runner in enumerate((on, off))
        ]
    finally:
        session.close()
    for together, by_itself in zip(pair, alone):
        assert together.instructions_per_inference == by_itself.instructions_per_inference
        assert together.instruction_mix().equals(by_itself.instruction_mix())
    assert pair[0].instructions_per_inference != pair[1].instructions_per_inference  # on and off really differ
