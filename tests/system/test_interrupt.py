"""Ctrl-C, an exception or the end of pytest ends every process a target started (issue 13, case 1).

Real runners, really started: an inner pytest runs a long profile of toy_cnn (ten million runs) on the
local target (the native runner), the emulated target (setarch + qemu-aarch64 + the instruction
counter), the host target (the Python-binding worker) and, under pytest-xdist, the local target again;
the test sends SIGINT to the inner pytest process only (``kill -INT PID``), then checks with ``ps``
that none of the processes it had started is left and that nothing writes into the artifacts folder
any more. Over adb the runner runs on the (stand-in) device: it must be killed there too, even by a
device whose adbd leaves a shell's process running when the connection closes.

SIGKILL to the inner pytest's whole process group (issue 23, item 6: how CI ends a timed-out job)
leaves pytest no chance to clean up; the runners, outside that group, must still be gone within seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers_faults import (
    alive,
    descendants,
    interrupt,
    processes_touching,
    snapshot,
    start_pytest,
    wait_for,
    write_project,
)

from pytest_sme2.run import emulation_setup as emulation
from pytest_sme2.run.native.build import build_runner

LONG_TEST = """
import pytest

@pytest.mark.model("toy_cnn")
def test_long(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner(runs=10_000_000, warmup=0, timeout=3000))
"""
EMULATION = emulation.status()
_TIMED_RUN = re.compile(r" run \d+/\d+")  # progress.log's "run i/N" of the host target's timed runs


def _project(tmp_path: Path, cache: Path, target: str) -> Path:
    return write_project(
        tmp_path / "project",
        LONG_TEST,
        {"sme2_target": target, "sme2_cache_dir": str(cache), "sme2_baselines": "false", "sme2_max_rounds": "1"},
    )


def _running_runner(pid: int, marker: str) -> dict[int, str] | None:
    """The inner pytest's processes once the long run has started (``marker`` is in its command line)."""
    below = descendants(pid)
    return below if any(marker in args for args in below.values()) else None


def _assert_nothing_left(project: Path, started: dict[int, str]) -> None:
    wait_for(lambda: not alive(started), timeout=3)  # orphans killed at exit may take a moment to be reaped
    left = alive(started)
    assert not left, f"processes started by the interrupted pytest are still running: {left}"
    touching = processes_touching(project)
    assert not touching, f"processes still use the project folder: {touching}"
    artifacts = project / ".sme2" / "artifacts"
    before = snapshot(artifacts)
    # No process of the session is left and none uses the folder (above): this second only catches a writer
    # neither check can see. Three seconds cost the six tests that call this 12 s for no case the checks above let
    # through.
    time.sleep(1)
    assert snapshot(artifacts) == before, "something still writes into the artifacts folder"


def _inside_timed_runs(project: Path, target: str) -> bool:
    """Wait until the long run is inside its timed runs, so the signal ends a run, not a start-up.

    The host target says its timed runs in progress.log ("run i/N"): wait for the first such line. The native runner
    loads toy_cnn in milliseconds, qemu starts in under a second here: once their command line is seen, a
    second (local) or two (emulated) are well inside ten million runs. A fixed three seconds for every target
    used to be slept, beside a runner busy on one of the two cores."""
    if target == "host":
        logs = project / ".sme2" / "artifacts"
        return bool(
            wait_for(
                lambda: any(
                    _TIMED_RUN.search(log.read_text(errors="replace")) for log in logs.glob("session-*/progress.log")
                ),
                timeout=120,
            )
        )
    time.sleep(2 if target == "emulated" else 1)
    return True


@pytest.mark.xdist_group("long_runners")  # with test_adb_target's Ctrl-C test: both look for the same runners
@pytest.mark.parametrize(
    "target, args, marker",
    [
        pytest.param("local", (), "--num_executions=10000000", id="local"),
        pytest.param(
            "emulated",
            (),
            "--num_executions=10000000",
            id="emulated",
            marks=pytest.mark.skipif(not EMULATION.ready, reason=f"emulated target not ready: {EMULATION.problem}"),
        ),
        pytest.param("host", (), "host_worker.py", id="host"),
        pytest.param("local", ("-n", "1"), "--num_executions=10000000", id="local-xdist"),
    ],
)
def test_sigint_ends_every_process_the_target_started(
    tmp_path: Path, shared_export_cache: Path, target: str, args: tuple[str, ...], marker: str
) -> None:
    if target == "local":
        build_runner()  # built (or found in the cache) here, not inside the timed wait below
    project = _project(tmp_path, shared_export_cache, target)
    inner = start_pytest(project, *args)
    started: dict[int, str] = {}
    try:
        found = wait_for(lambda: _running_runner(inner.pid, marker), timeout=600, interval=0.5)
        assert found, f"the long run never started:\n{(project / 'out.txt').read_text()[-3000:]}"
        inside = _inside_timed_runs(project, target)
        assert inside, f"the long run never reached its timed runs:\n{(project / 'out.txt').read_text()[-3000:]}"
        started = descendants(inner.pid)  # everything it runs now, e.g. qemu's instruction counter
        code = interrupt(inner, signal.SIGINT)
        output = (project / "out.txt").read_text(errors="replace")
        assert "KeyboardInterrupt" in output, output[-3000:]
        assert code == pytest.ExitCode.INTERRUPTED, output[-3000:]
        _assert_nothing_left(project, started)
    finally:
        _kill(inner, started)


@pytest.mark.xdist_group("long_runners")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_termination_signals_end_the_runner_too(tmp_path: Path, shared_export_cache: Path, sig: int) -> None:
    """A CI job cancelled (SIGTERM) or a closed terminal (SIGHUP): pytest dies of the signal, its runner with it."""
    build_runner()
    project = _project(tmp_path, shared_export_cache, "local")
    inner = start_pytest(project)
    started: dict[int, str] = {}
    try:
        found = wait_for(lambda: _running_runner(inner.pid, "--num_executions=10000000"), timeout=600, interval=0.5)
        assert found, f"the long run never started:\n{(project / 'out.txt').read_text()[-3000:]}"
        started = descendants(inner.pid)
        assert interrupt(inner, sig) == -sig  # the signal still ends pytest as it would without the plugin
        _assert_nothing_left(project, started)
    finally:
        _kill(inner, started)


@pytest.mark.xdist_group("long_runners")
@pytest.mark.parametrize(
    "target, marker",
    [
        pytest.param("local", "--num_executions=10000000", id="local"),
        pytest.param(
            "emulated",
            "--num_executions=10000000",
            id="emulated",
            marks=pytest.mark.skipif(not EMULATION.ready, reason=f"emulated target not ready: {EMULATION.problem}"),
        ),
        pytest.param("host", "host_worker.py", id="host"),
    ],
)
def test_sigkill_of_pytest_ends_every_process_the_target_started(
    tmp_path: Path, shared_export_cache: Path, target: str, marker: str
) -> None:
    """A CI runner ends a timed-out job with SIGKILL to its process group (issue 23, item 6).

    pytest gets no chance to clean up, and the runners sit in sessions of their own, outside that
    group: they must end themselves when pytest is gone (the parent-death signal, supervisor.py).
    """
    if target == "local":
        build_runner()
    project = _project(tmp_path, shared_export_cache, target)
    inner = start_pytest(project)  # its own session and process group, like `setsid pytest ...`
    started: dict[int, str] = {}
    try:
        found = wait_for(lambda: _running_runner(inner.pid, marker), timeout=600, interval=0.5)
        assert found, f"the long run never started:\n{(project / 'out.txt').read_text()[-3000:]}"
        inside = _inside_timed_runs(project, target)
        assert inside, f"the long run never reached its timed runs:\n{(project / 'out.txt').read_text()[-3000:]}"
        started = descendants(inner.pid)
        os.killpg(inner.pid, signal.SIGKILL)  # kill -9 -- -PGID
        inner.wait(timeout=30)
        wait_for(lambda: not alive(started), timeout=5)
        left = alive(started)
        assert not left, f"processes started by the killed pytest still run 5 s after it: {left}"
        assert not processes_touching(project), f"processes still use the project folder: {processes_touching(project)}"
    finally:
        _kill(inner, started)


def _kill(inner: subprocess.Popen, started: dict[int, str]) -> None:
    """Whatever a failed check left behind, so one failure does not leave runners burning the CPU."""
    if inner.poll() is None:
        inner.kill()
        inner.wait()
    for pid in alive(started):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
