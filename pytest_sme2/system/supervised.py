"""Every process a target starts, ended when pytest stops for any reason, SIGKILL included.

Runners, qemu, the instruction counter and the host worker each start in a
session of their own, so that a timeout can kill a whole process group (qemu
and what it runs) and a Ctrl-C in the terminal does not reach them half-way
through writing an ETDump. The price is that nothing ends them for us: a
``kill -INT`` to pytest, an exception between start and wait, or pytest's exit
would leave a runner at 100% CPU writing into the artifacts folder with parent
PID 1. So every such process is started here and recorded; it is ended when the
wait for it is interrupted (any exception, KeyboardInterrupt included), when
pytest exits (atexit), and on SIGTERM or SIGHUP to pytest (``install_signal_handlers``).

None of that runs when pytest is killed with SIGKILL (how CI runners end a
timed-out job, ``kill -9 -- -PGID``), and the runners are outside pytest's
group. So each command runs under ``supervisor.py``, the leader of its group,
which kills the group the moment pytest is gone (Linux's parent-death signal,
and a poll of its parent PID) and, given ``limit_s``, after that long even if
pytest lives but stopped watching. This is the one place that starts them.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

_live: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()


SUPERVISOR = Path(__file__).with_name("supervisor.py")
# Beyond the caller's own timeout, how long the supervisor waits before ending a run pytest stopped watching.
LIMIT_GRACE_S = 60.0


def start(command: Sequence[str], limit_s: float | None = None, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` of ``command`` under the supervisor, in a new session, recorded until ``end``
    (or a finished ``wait``).

    The returned process is the supervisor: its PID leads the command's group (``end`` kills the
    group) and its exit status is the command's. ``limit_s``: a wall-clock limit the supervisor
    enforces itself (plus ``LIMIT_GRACE_S``), for when pytest is alive but not watching; None for
    long-lived children (the host worker). A command that cannot be started raises here, as
    ``Popen`` would.
    """
    command = list(command)
    _check_startable(command[0], kwargs.get("cwd"), kwargs.get("env"))
    limit = 0.0 if limit_s is None else float(limit_s) + LIMIT_GRACE_S
    supervised = [sys.executable, "-I", "-S", str(SUPERVISOR), str(os.getpid()), repr(limit), "--", *command]
    process = subprocess.Popen(supervised, start_new_session=True, **kwargs)
    with _lock:
        _live[process.pid] = process
    return process


def _check_startable(program: str, cwd: Any, env: Mapping[str, str] | None) -> None:
    """FileNotFoundError/PermissionError for a program that cannot run, as Popen raises them without the supervisor."""
    if os.sep in program:
        path = Path(cwd or ".") / program
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        return
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    if shutil.which(program, path=search) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def wait(process: subprocess.Popen, timeout: float | None = None) -> int:
    """Wait for ``process``; whatever interrupts the wait (a timeout, Ctrl-C, any exception) ends its group first."""
    try:
        code = process.wait(timeout=timeout)
    except BaseException:
        end(process)
        raise
    forget(process)
    return code


def end(process: subprocess.Popen) -> None:
    """Kill ``process``'s whole group (qemu and its guest, a shell and its children) and reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            process.kill()  # if it left its group, or the group is gone
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
    forget(process)


def forget(process: subprocess.Popen) -> None:
    """Stop tracking ``process`` (it finished and was reaped)."""
    with _lock:
        _live.pop(process.pid, None)


def running() -> list[subprocess.Popen]:
    """The processes started here that were neither waited for nor ended."""
    with _lock:
        return [process for process in _live.values() if process.poll() is None]


_restores: dict[int, Callable[[], None]] = {}  # id -> what puts a device setting back, run once by end_all


def on_end(key: int, restore: Callable[[], None]) -> None:
    """Run ``restore`` when the session ends however it ends (end_all: at exit, SIGTERM, SIGHUP), unless
    ``forget_end(key)`` came first: a device setting a session changed is put back even when it is killed."""
    with _lock:
        _restores[key] = restore


def forget_end(key: int) -> None:
    with _lock:
        _restores.pop(key, None)


def end_all() -> None:
    """End every process started here that still runs, then put back what sessions changed on devices."""
    with _lock:
        processes = list(_live.values())
        restores = list(_restores.values())
        _restores.clear()
    for process in processes:
        end(process)
    for restore in restores:
        try:
            restore()
        except Exception:  # noqa: BLE001 - a device gone by now: nothing left to put back, and exit goes on
            pass


atexit.register(end_all)

_HANDLED = (signal.SIGTERM, signal.SIGHUP)


def install_signal_handlers() -> None:
    """On SIGTERM or SIGHUP to pytest: end every started process, then let the signal do what it did.

    Only where nobody else handles the signal already (a CI runner's or another plugin's handler is
    left alone) and only in the main thread, where Python allows handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for number in _HANDLED:
        if signal.getsignal(number) is signal.SIG_DFL:
            signal.signal(number, _end_all_then_die)


def _end_all_then_die(number: int, frame: object) -> None:
    end_all()
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
