"""Issue 28 item 2 on hardware, end to end: the local target's real runner, a real model, a baseline recorded once.

Each runner process loads the model's method several times, each right after a load of the reference program
(native_runner.STARTUP_REPEATS); the gate judges each process's warm loads relative to those reference loads. A
bigger weight (XNNPACK packs it in Method::init) fails on init, named with its numbers; unchanged, it passes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers_gate import write_model_project

from pytest_sme2.run.native.build import build_problem
from pytest_sme2.run.targets.native_runner import STARTUP_REPEATS

PROBLEM = build_problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"the native runner cannot be built here: {PROBLEM}")

# A linear head over SIZE x SIZE maps: its weight, which init packs, grows with SIZE squared.
MODEL = '''
"""A small CNN whose head's weight sets how much Method::init packs."""
import torch

SIZE = {size}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * SIZE * SIZE, 128)

    def forward(self, x):
        return self.head(torch.flatten(torch.relu(self.conv(x)), 1))


def get_eager_model():
    torch.manual_seed(0)
    return Net().eval()


def get_example_inputs():
    return (torch.ones(1, 4, SIZE, SIZE),)
'''
TEST = """
import pytest


@pytest.mark.model("packed")
@pytest.mark.baseline(latency=1.0, shares=0.5)  # a few short runs: only start-up is under test here
def test_packed(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def _project(pytester: pytest.Pytester, cache: Path, size: int) -> None:
    write_model_project(pytester, "packed", MODEL.format(size=size), TEST, "local", cache)


def _record(baselines: Path) -> dict:
    [path] = baselines.rglob("*.json")
    [record] = json.loads(path.read_text())["profiles"].values()
    return record


def test_a_bigger_weight_fails_on_init_and_unchanged_passes(
    pytester: pytest.Pytester, shared_export_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # this file tests the gate: turn it back on
    _project(pytester, shared_export_cache, size=24)
    # Start-up is under test, not whether this machine is quiet enough for a latency baseline: beside other work
    # (a helper's make perf) the quality check refused it (28 of 48 runs disturbed), so it is accepted here.
    pytester.runpytest_inprocess(
        "--sme2-update-baselines", "--sme2-baseline-replicas=4", "--sme2-runs=12", "--sme2-accept-noisy-baselines"
    ).assert_outcomes(passed=1)
    kept = _record(pytester.path / "baselines")
    assert kept["chunk_sizes"] == [12] * 4 and len(kept["init_relative_per_chunk"]) == 4
    # A process whose warm loads were all disturbed (a loaded machine: load average 9 here once) reads None, as
    # the profile says; the others are positive, and most processes have a reading.
    relative = kept["init_relative_per_chunk"] + kept["load_relative_per_chunk"]
    assert all(value is None or value > 0 for value in relative) and sum(v is not None for v in relative) >= 4
    # load (Program::load_method) holds init (Method::init): never shorter
    assert all(
        load >= init
        for load, init in zip(kept["load_ms_per_chunk"], kept["init_ms_per_chunk"])
        if load is not None and init is not None
    )

    unchanged = pytester.runpytest_inprocess("--sme2-runs=12", "--sme2-replicas=3", "--sme2-artifacts-dir=same")
    unchanged.assert_outcomes(passed=1)
    judged = _verdicts(pytester.path / "same")
    for check in ("load", "init"):
        line = judged[check]
        assert line.startswith(("[ok] ", "[improvement] ")), line
        assert "relative to the reference program's load before each load" in line
    assert judged["peak"].startswith("[ok] "), judged["peak"]  # the repeated loads come after the runs' peaks

    _project(pytester, shared_export_cache, size=48)  # the head's weight 4 times as big
    changed = pytester.runpytest_inprocess("--sme2-runs=12", "--sme2-replicas=3", "--sme2-artifacts-dir=grown")
    changed.assert_outcomes(failed=1)
    init = _verdicts(pytester.path / "grown")["init"]
    assert init.startswith("[regression] ") and ": init (Method::init) regression: init (Method::init) +" in init, init
    growth = float(re.search(r"init \(Method::init\) \+([\d.]+)%", init).group(1))
    assert growth > 50, init
    assert any("init (Method::init) +" in line for line in changed.stdout.lines)
    # the load holds the init: moved by it, it is no second regression (a CI owner's trial counted two)
    load = _verdicts(pytester.path / "grown")["load"]
    assert load.startswith(("[note] ", "[ok] ")), load
    assert load.startswith("[ok] ") or load.endswith(
        "(it includes init (Method::init), which regressed: one cause, " "judged there)"
    ), load


def _verdicts(artifacts: Path) -> dict[str, str]:
    """Every verdict line of the session's one baseline file, by check (the first word of its message)."""
    [listed] = artifacts.rglob("baseline-verdicts~*.txt")
    lines = listed.read_text(encoding="utf-8").split("every verdict", 1)[1].splitlines()[1:]
    by_check = {}
    for line in (line.strip() for line in lines):
        check = line.split("]: ", 1)[1].split(" ", 1)[0]  # "[status] label [variant]: message"
        by_check.setdefault(check, line)
    return by_check


def test_each_runner_process_loads_the_method_after_each_reference_load(tmp_path: Path) -> None:
    """The runner's answer and ETDump: STARTUP_REPEATS loads and inits of the model, one reference load before
    each, and the Profile's per-process value is the median of the warm ones' ratios."""
    from conftest import REPO
    from pytest_sme2 import Recipe
    from pytest_sme2.measure.runner import Runner
    from pytest_sme2.measure.session import Settings, Sme2Session
    from pytest_sme2.run.targets import RunSpec

    session = Sme2Session(Settings(target="local", cache_dir=tmp_path / "cache", session_dir=tmp_path / "art"))
    try:
        session.registry.register_dir(REPO / "models")
        exported = session.export("toy_cnn", Recipe())
        profile = Runner(session, RunSpec(runs=3, warmup=1, replicas=2), session.test_dir("t")).profile(exported)
    finally:
        session.close()
    assert profile.chunk_sizes == [3, 3]
    assert len(profile.trace.startup_parts) == 2 and profile.reference_load_ms.size == 2 * STARTUP_REPEATS
    for index, (loads, inits) in enumerate(profile.trace.startup_parts):
        assert loads.size == inits.size == STARTUP_REPEATS and np.all(loads >= inits) and np.all(inits > 0)
        references = profile.reference_load_ms[index * STARTUP_REPEATS : (index + 1) * STARTUP_REPEATS]
        # the median of the warm loads' ratios that are not disturbed (a stall on this busy machine may drop some)
        ratios = inits[1:] / references[1:]
        assert ratios.min() <= profile.init_relative_per_chunk[index] <= ratios.max()
        assert inits[1:].min() <= profile.init_ms_per_chunk[index] <= inits[1:].max()
    # the first process's first load: the method its runs used (the others came after the runs)
    assert profile.init_ms == pytest.approx(profile.trace.startup_parts[0][1][0])
