"""The supervisor every runner starts under (issue 23, item 6) is invisible to callers, except that
nothing it runs outlives pytest.

Callers read the runner's exit status and expect Popen's errors for a program that cannot start;
the supervisor must keep both. A parent thread that ends must not end a long-lived child (the host
worker), while the death of the parent process must, grandchildren included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers_faults import REPO, alive, descendants, wait_for

from pytest_sme2.system import supervised

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals are POSIX")


def test_the_command_exit_status_is_passed_on() -> None:
    assert supervised.wait(supervised.start(["sh", "-c", "exit 3"])) == 3
    assert supervised.wait(supervised.start(["sh", "-c", "kill -SEGV $$"])) == -signal.SIGSEGV


def test_output_goes_where_the_caller_sent_it() -> None:
    process = supervised.start(["sh", "-c", "echo out; echo err >&2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.communicate(timeout=60) == (b"out\n", b"err\n")
    supervised.forget(process)


def test_a_program_that_cannot_start_raises_as_popen_does(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        supervised.start([str(tmp_path / "missing")])
    with pytest.raises(FileNotFoundError):
        supervised.start(["no-such-program-pytest-sme2"])
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        supervised.start([str(script)])


def test_the_wall_clock_limit_ends_a_run_nobody_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervised, "LIMIT_GRACE_S", 0.0)
    started = time.monotonic()
    process = supervised.start(["sleep", "60"], limit_s=1.0, stderr=subprocess.PIPE)
    _, err = process.communicate(timeout=30)
    supervised.forget(process)
    assert process.returncode == -signal.SIGKILL and time.monotonic() - started < 20
    assert b"ran past its limit of 1 s" in err


def test_the_end_of_the_starting_thread_does_not_end_the_child() -> None:
    box: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: box.append(supervised.start(["sleep", "60"])))
    thread.start()
    thread.join()
    try:
        time.sleep(1.5)  # the parent-death signal arrives at once; the parent-PID poll runs every 0.5 s
        assert box[0].poll() is None, "the child ended with the thread that started it, not with pytest"
    finally:
        supervised.end(box[0])


PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from pytest_sme2.system import supervised
    supervised.start(["sh", "-c", "sleep 300 & sleep 300"])
    print("started", flush=True)
    time.sleep(300)
""")


def test_sigkill_of_the_parent_ends_the_child_and_its_children(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(repo=str(REPO)))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    started: dict[int, str] = {}
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "started"
        started = wait_for(lambda: (found := descendants(parent.pid)) and len(found) >= 4 and found, timeout=30) or {}
        assert len(started) >= 4, started  # supervisor, sh, two sleeps
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        wait_for(lambda: not alive(started), timeout=5)
        assert not alive(started), f"left running after the parent's SIGKILL: {alive(started)}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in alive(started):
            os.kill(pid, signal.SIGKILL)
