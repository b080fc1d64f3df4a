"""Measurements of one test made at the same time, where the target says its answers do not depend on it.

Why: on the emulated target a variant's verdicts are counts of guest instructions, the same however busy the
machine, and SME2 on and off of a real model each take minutes of one core (EfficientSAM at 1024x1024: 500 s on,
longer off). Made one after the other they cost the sum; side by side in separate processes, on a machine with a
core each, the longer of the two. A timed target's runs would disturb each other, so it says 1
(``Target.side_by_side``) and its variants run one after the other, alternating as before.

Threads, not processes: each measurement is a runner process the thread waits on (the emulator does the work),
so Python's lock is not held while they run. They are daemon threads the calling thread waits for; a Ctrl-C
there ends their runner processes (supervised.end_all) instead of leaving them running until pytest exits.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence, TypeVar

from pytest_sme2.system import supervised

T = TypeVar("T")


def cores_for_side_by_side() -> int:
    """How many measurements may run at once in this pytest process: the cores it may use, shared out among
    pytest-xdist's workers when it is one of them (each worker runs its own tests side by side)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        workers = 1
    return max(1, cores // workers)


def side_by_side(calls: Sequence[Callable[[], T]], at_once: int) -> list[T]:
    """``[call() for call in calls]``, up to ``at_once`` of them at a time; the answers in the order of ``calls``.

    Every call runs to its end even when another fails (nothing is left half-written behind the error); the
    first failure in the order of ``calls`` is raised. ``at_once`` of 1 (or one call) runs them in turn here.
    """
    if at_once <= 1 or len(calls) <= 1:
        return [call() for call in calls]
    answers: list[T | None] = [None] * len(calls)
    errors: list[Exception | None] = [None] * len(calls)
    slots = threading.Semaphore(at_once)

    def run(index: int) -> None:
        with slots:
            try:
                answers[index] = calls[index]()
            except Exception as error:  # noqa: BLE001 - raised in the calling thread once every call has ended
                errors[index] = error

    threads = [
        threading.Thread(target=run, args=(index,), name=f"sme2-side-by-side-{index}", daemon=True)
        for index in range(len(calls))
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except BaseException:  # Ctrl-C (or pytest's exit) while waiting: end the measurements' processes
        supervised.end_all()
        raise
    for error in errors:
        if error is not None:
            raise error
    return answers  # type: ignore[return-value] # every call answered: none failed
