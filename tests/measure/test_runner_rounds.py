"""Automatic run counts: a variant whose runs the machine disturbed gets more rounds (Runner.profile).

A scripted target writes synthetic ETDumps (ExecuTorch's own schema) whose
every time is known, so which runs are disturbed is known by construction.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers_etdump import RunSpec as EtRun
from helpers_etdump import write_etdump

from pytest_sme2.errors import Sme2DeprecationWarning
from pytest_sme2.measure.runner import Runner, alternate, clean_runs_wanted
from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run.targets import RunResult, RunSpec, TargetInfo

STEADY_NS = 1_000_000
STALLED_NS = 5_000_000  # a run another job took the core from: 5x the steady one


class ScriptedTarget:
    """Each run() call writes the next scripted round: how many of its runs are stalled."""

    side_by_side = 1  # timed runs: one at a time

    def __init__(self, stalled_per_round: list[int]):
        self.stalled = list(stalled_per_round)
        self.calls = 0
        self.fresh: list[bool] = []  # spec.fresh_process of each call
        self.info = TargetInfo(name="host", cpu="scripted", arch="x86_64", has_sme2=False)

    def unsupported(self, sme2: bool | None) -> str | None:
        return None

    def run(self, pte: Path, inputs: Path | None, spec: RunSpec, out_dir: Path, reference: Path | None = None):
        stalled = self.stalled[min(self.calls, len(self.stalled) - 1)]
        self.calls += 1
        self.fresh.append(spec.fresh_process)
        out_dir.mkdir(parents=True, exist_ok=True)
        times = [STALLED_NS if i < stalled else STEADY_NS for i in range(spec.runs)]
        etdump = write_etdump(out_dir / "timed.etdp", [EtRun(e2e_ns=ns) for ns in times])
        log = out_dir / "log.txt"
        log.write_text("scripted\n")
        return RunResult(
            spec=spec,
            target=self.info,
            out_dir=out_dir,
            wall_ms=np.array(times) / 1e6,
            timed_etdump=etdump,
            warmup_etdump=None,
            log=log,
            outputs=None,
            sme2_active=False,
        )

    def device_state(self) -> None:
        return None

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real exported program (the scripted target never loads it, but the runner checks it)."""
    from conftest import TINY_MODEL
    from pytest_sme2 import Recipe

    root = tmp_path_factory.mktemp("rounds")
    (root / "models").mkdir()
    (root / "models" / "tiny.py").write_text(TINY_MODEL)
    session = Sme2Session(Settings(target="host", cache_dir=root / "cache", session_dir=root / "s"))
    session.registry.register_dir(root / "models")
    return session.export("tiny", Recipe()).path


def runner(tmp_path: Path, target: ScriptedTarget, **spec: int) -> Runner:
    session = Sme2Session(
        Settings(target="host", cache_dir=tmp_path / "cache", session_dir=tmp_path / "s", latency_reference=False)
    )
    session._target = target  # noqa: SLF001 - the scripted target stands in for a real one
    return Runner(session, RunSpec(**spec), session.test_dir("t"))


def test_wanted_undisturbed_runs() -> None:
    assert clean_runs_wanted(40) == 20 and clean_runs_wanted(41) == 21
    assert clean_runs_wanted(19) == 0  # a quick look: no extra rounds


def test_quiet_machine_costs_no_extra_round(tmp_path: Path, program: Path) -> None:
    target = ScriptedTarget([3])
    profile = runner(tmp_path, target, runs=40).profile(program)
    assert target.calls == 1 and profile.runs == 40 and profile.disturbed_runs == 3


def test_busy_machine_gets_rounds_until_half_are_undisturbed(tmp_path: Path, program: Path) -> None:
    target = ScriptedTarget([30, 12, 0])  # 10 undisturbed of 40, then 28 of 40 more
    profile = runner(tmp_path, target, runs=40).profile(program)
    assert target.calls == 2
    assert profile.runs == 80 and profile.disturbed_runs == 42 and int(profile.clean.sum()) == 38
    assert profile.metadata["chunks"] == 2


def test_rounds_stop_at_max_rounds(tmp_path: Path, program: Path) -> None:
    target = ScriptedTarget([39])
    profile = runner(tmp_path, target, runs=40).profile(program)
    assert target.calls == 3 and profile.runs == 120 and int(profile.clean.sum()) == 3
    single = ScriptedTarget([39])
    assert runner(tmp_path / "one", single, runs=40, max_rounds=1).profile(program).runs == 40
    assert single.calls == 1


def test_the_earlier_spellings_of_extra_rounds_and_replica_sizes_still_work_and_warn(
    tmp_path: Path, program: Path
) -> None:
    target = ScriptedTarget([39])
    with pytest.warns(Sme2DeprecationWarning, match=r"Runner.profile\(top_up=\) is deprecated: use .*extra_rounds="):
        profile = runner(tmp_path, target, runs=40).profile(program, top_up=False)
    assert target.calls == 1  # top_up=False is extra_rounds=False: one round however disturbed
    with pytest.warns(Sme2DeprecationWarning, match=r"Profile.process_sizes is deprecated: use Profile.replica_sizes"):
        assert profile.process_sizes == profile.replica_sizes == [40]


def test_alternating_variants_get_extra_rounds_too(tmp_path: Path, program: Path) -> None:
    target = ScriptedTarget([8] * 8 + [0])  # 8 of each chunk's 10 runs stalled: 8 undisturbed of 40 a side
    a = runner(tmp_path, target, runs=40)
    b = Runner(a.session, RunSpec(runs=40, sme2=None, threads=2), a.test_dir)
    first, second = alternate(program, a, b, rounds=4)
    # Two more alternating rounds of 10 clean runs a side bring each to 28 undisturbed.
    assert (first.runs, second.runs) == (60, 60)
    assert int(first.clean.sum()) == int(second.clean.sum()) == 28


def test_a_baseline_update_measures_each_replica_afresh_and_keeps_their_sizes(tmp_path: Path, program: Path) -> None:
    # 3 replicas; the second one's machine was busy (30 of 40 stalled), so it gets an extra round in its own process.
    target = ScriptedTarget([0, 30, 0, 0])
    profile = runner(tmp_path, target, runs=40, replicas=3).profile(program)
    assert target.fresh == [True, True, False, True]  # each replica starts fresh; its extra round does not
    assert profile.replica_sizes == [40, 80, 40] and profile.runs == 160


def test_a_check_is_one_replica_and_emulated_counts_need_no_more(tmp_path: Path, program: Path) -> None:
    target = ScriptedTarget([0])
    assert runner(tmp_path, target, runs=40).profile(program).replica_sizes == [40] and target.fresh == [False]
    emulated = ScriptedTarget([0])
    emulated.info = TargetInfo(name="emulated", cpu="scripted", arch="aarch64", has_sme2=True, emulated=True)
    runner(tmp_path / "e", emulated, runs=2, replicas=3).profile(program)
    assert emulated.calls == 1


def test_alternating_variants_of_a_baseline_update_are_replicated_whole(tmp_path: Path, program: Path) -> None:
    target = ScriptedTarget([0])
    a = runner(tmp_path, target, runs=40, replicas=2)
    b = Runner(a.session, RunSpec(runs=40, sme2=None, threads=2, replicas=2), a.test_dir)
    first, second = alternate(program, a, b, rounds=4)
    # two replicas of the whole A, B, A, B ... measurement, each starting in a fresh process
    assert target.fresh == [True] + [False] * 7 + [True] + [False] * 7
    assert first.replica_sizes == second.replica_sizes == [40, 40]
