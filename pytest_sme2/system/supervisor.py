"""Runs one command for pytest-sme2 and ends it, and everything it started, when pytest is gone.

Runners, qemu and the host worker start in a session of their own (``supervised.start``), so a
``kill -9 -- -PGID`` of pytest's group (how CI ends a timed-out job) misses them and nothing in
pytest survives to end them: they used to run on at 100% CPU with parent PID 1. This small
process sits between pytest and the command, as the leader of the command's process group:

- on Linux the kernel sends it a signal the moment pytest dies (``PR_SET_PDEATHSIG``), and it
  also polls its parent PID every half second (the only way on macOS);
- it then kills its whole process group with SIGKILL: the command and what the command started
  (perf's workload, a shell's children), itself included;
- the command itself is also armed to die with SIGKILL if this process dies, so killing the
  supervisor alone cannot leave it running;
- an optional wall-clock limit ends the group even if pytest lives but stopped watching (a
  stopped or hung pytest); pytest's own timeout comes first, this one is a backstop.

The command's exit status is passed on as its own (the same code, or death by the same signal),
so callers see what they saw without it. Standard library only, started with ``python -I -S``
(about 25 ms), so it depends on nothing that pytest's environment may have broken.

    python -I -S supervisor.py PARENT_PID LIMIT_S -- COMMAND [ARG...]

``LIMIT_S`` 0 means no wall-clock limit.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import NoReturn

POLL_S = 0.5  # how often the parent PID is checked where no parent-death signal exists
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The signal the kernel sends us when the thread that started us ends. Not SIGTERM: when only that
# thread ended (pytest itself lives on) we must tell it from a request to stop.
PARENT_DIED = signal.SIGUSR2
STOP = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# What Python sets to SIG_IGN at start-up; a program run from here must get them back as defaults.
PYTHON_IGNORES = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))


def set_parent_death_signal(number: int) -> bool:
    """Ask Linux to send ``number`` when our parent thread ends; False where that does not exist."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(number), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def kill_group() -> NoReturn:
    """SIGKILL to our process group: the command, whatever it started, and this process."""
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(128 + signal.SIGKILL)


def _exec_command(command: list[str], supervisor: int) -> NoReturn:
    """In the forked child: default signals, die with the supervisor, become the command."""
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, PARENT_DIED, *STOP, *PYTHON_IGNORES):
            signal.signal(number, signal.SIG_DFL)
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != supervisor:  # the supervisor died before the signal was armed
            os._exit(128 + signal.SIGKILL)
        os.execvp(command[0], command)
    except BaseException as exc:  # noqa: BLE001 - reported to the runner log, then the usual 127
        os.write(2, f"pytest-sme2: cannot run {command[0]}: {exc}\n".encode(errors="replace"))
    os._exit(127)


def _exit_like(status: int) -> NoReturn:
    """End this process as the command ended: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            import resource

            _, hard = resource.getrlimit(resource.RLIMIT_CORE)
            resource.setrlimit(resource.RLIMIT_CORE, (0, hard))  # the command's crash, not a core of ours
            signal.signal(number, signal.SIG_DFL)
        except (ImportError, OSError, ValueError):
            pass
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal that does not end a process by default
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _close_inherited(keep: set[int]) -> None:
    """Drop our copies of the command's pipes, so its reader sees EOF when the command ends, not when we do."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for name in os.listdir("/dev/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, already closed


def supervise(parent: int, limit_s: float, command: list[str]) -> NoReturn:
    """Run ``command`` as our child until it ends (then end as it did), or kill the group when ``parent``
    is gone, a stop signal arrives or ``limit_s`` (> 0) passes."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)  # every signal below also writes its number here, waking select()
    for number in (signal.SIGCHLD, PARENT_DIED, *STOP):
        signal.signal(number, lambda *_: None)
    set_parent_death_signal(PARENT_DIED)  # where it does not exist, the poll below finds out within POLL_S
    if os.getppid() != parent:  # pytest died before the death signal was armed
        kill_group()
    me = os.getpid()
    child = os.fork()
    if child == 0:
        _exec_command(command, me)
    _close_inherited({wake_read, wake_write})
    deadline = time.monotonic() + limit_s if limit_s > 0 else None
    while True:
        wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
        select.select([wake_read], [], [], wait)
        try:
            received = set(os.read(wake_read, 512))
        except BlockingIOError:
            received = set()
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            _exit_like(status)
        # A parent-death signal with our parent PID unchanged means only the thread that started us
        # ended (pytest lives on); the kernel sends it again when pytest itself is gone, and the poll sees it.
        if os.getppid() != parent or received & set(STOP):
            kill_group()
        if deadline is not None and time.monotonic() >= deadline:
            os.write(
                2,
                f"pytest-sme2: {command[0]} ran past its limit of {limit_s:g} s and was killed by its "
                "supervisor (pytest did not end it)\n".encode(errors="replace"),
            )
            kill_group()


def main(argv: list[str]) -> NoReturn:
    if len(argv) < 5 or argv[3] != "--":
        os.write(2, b"usage: supervisor.py PARENT_PID LIMIT_S -- COMMAND [ARG...]\n")
        os._exit(2)
    supervise(int(argv[1]), float(argv[2]), argv[4:])


if __name__ == "__main__":
    main(sys.argv)
