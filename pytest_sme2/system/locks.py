"""One inter-process lock for every cache in pytest-sme2 (exports, runner builds, qemu).

An flock on a lock file beside the entry: pytest-xdist workers and parallel
sessions that want the same entry wait for the first one to finish it, and the
lock dies with its process, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import ContextManager, Iterator

from pytest_sme2.system.safe_files import open_no_follow

LOCKS_FOLDER = "locks"  # under a cache folder: one lock file per entry being made


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created with its folder) for the block; a link planted
    at ``lock_path`` in a shared cache is refused, never opened (safe_files)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_no_follow(lock_path, os.O_RDWR | os.O_CREAT), "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def entry_lock(cache_dir: Path, name: str) -> ContextManager[None]:
    """The lock of the entry ``name`` of the cache folder ``cache_dir`` (exports, counted runs), held while
    one process looks the entry up and, on a miss, makes it."""
    return locked(cache_dir / LOCKS_FOLDER / f"{name}.lock")


@contextlib.contextmanager
def try_locked(lock_path: Path, *, create: bool = True) -> Iterator[bool]:
    """The lock on ``lock_path`` taken without waiting: yields True while this process holds it (or, with
    ``create`` False, when no lock file exists, so nobody can hold it; nothing is written), False when another
    process holds it. For ``pytest-sme2 cache prune``: an entry being made or counted is skipped, never waited
    on, and no process can start making the entry while it is removed. A link at ``lock_path`` is refused."""
    flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY  # flock needs no write access
    if create:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = open_no_follow(lock_path, flags)
    except FileNotFoundError:
        yield True
        return
    with os.fdopen(descriptor, "r+" if create else "r") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
