"""Every process a target starts, ended when pytest stops for any reason.

Runners, qemu, the instruction counter and the host worker each start in a
session of their own, so that a timeout can kill a whole process group (qemu
and what it runs) and a Ctrl-C in the terminal does not reach them half-way
through writing an ETDump. The price is that nothing ends them for us: a
``kill -INT`` to pytest, an exception between start and wait, or pytest's exit
would leave a runner at 100% CPU writing into the artifacts folder with parent
PID 1. So every such process is started here and recorded; it is ended when the
wait for it is interrupted (any exception, KeyboardInterrupt included), when
pytest exits (atexit), and on SIGTERM or SIGHUP to pytest (``install_signal_handlers``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
from typing import Any, Sequence

_live: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()


def start(command: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session, recorded until ``end`` (or a finished ``wait``)."""
    process = subprocess.Popen(list(command), start_new_session=True, **kwargs)
    with _lock:
        _live[process.pid] = process
    return process


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


def end_all() -> None:
    """End every process started here that still runs."""
    with _lock:
        processes = list(_live.values())
    for process in processes:
        end(process)


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
