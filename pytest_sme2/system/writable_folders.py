"""The folders pytest-sme2 writes into, and one clear error when one of them cannot be written.

Why: a folder without write permission, on a read-only mount or on a full disk
used to surface as a 60-line ``PermissionError``/``OSError`` traceback from
wherever the first write happened. The user needs two facts: which of our
folders it was, and which option or ini key moves it. Each folder is a
:class:`Place` that knows both; a session checks its places before the first
test (without creating anything) and turns any later ``OSError`` under one of
them (a disk that fills mid-session) into a :class:`StorageError` that says so.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pytest_sme2.errors import StorageError, UsageError


@dataclass(frozen=True)
class Place:
    """One folder pytest-sme2 writes into: what it holds, where it is, and what moves it."""

    what: str
    root: Path
    moved_by: str

    def holds(self, path: str | os.PathLike[str]) -> bool:
        try:
            Path(os.path.abspath(path)).relative_to(os.path.abspath(self.root))
        except ValueError:
            return False
        return True


def option_and_ini(option: str, ini: str) -> str:
    return f"{option} (or ini {ini})"


def check_writable(place: Place) -> None:
    """UsageError if ``place.root`` could not be created or written, checked without creating anything:
    the nearest existing folder on its path must be a writable folder."""
    existing = Path(os.path.abspath(place.root))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(
            f"the {place.what} {place.root} cannot be created: {existing} is a file, not a folder. " f"{_fix(place)}"
        )
    own_folder = existing == Path(os.path.abspath(place.root))  # it exists; else the nearest existing parent
    shown = place.root if own_folder else f"{place.root} (in {existing})"
    if not os.access(existing, os.W_OK | os.X_OK):
        reason = "it is on a read-only file system" if _read_only(existing) else "permission denied"
        raise UsageError(f"the {place.what} {shown} is not writable: {reason}. {_fix(place)}")
    # the folder's own mode, not a parent's: / is 0555 and /root 0550 on some systems
    mode = read_only_mode(existing) if own_folder and os.geteuid() == 0 else None
    if mode is not None:  # as any other user the kernel refused it above
        raise UsageError(
            f"the {place.what} {shown} is not writable: it is read-only (mode {mode:04o}), and "
            f"pytest-sme2 does not write into it even as root. {_fix(place)} (chmod u+w)"
        )


def read_only_mode(path: Path) -> int | None:
    """``path``'s mode when someone made it read-only and meant it to stay so; None otherwise. The one rule for
    the places pytest-sme2 writes (check_writable) and the baselines it replaces (baselines.write):

    - a folder with no write bit at all (chmod a-w, a CI cache restored read-only): the kernel stops any other
      user's writes into it, not root's, so pytest-sme2 stops its own as root too;
    - a file without its owner's write bit (chmod u-w): a file is replaced by a rename, which the file's own
      mode never stops for anyone (a review: a 0464 baseline was replaced), so that bit is the owner's word."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if path.is_dir():
        return None if mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) else mode
    return None if mode & stat.S_IWUSR else mode


def explain(exc: OSError, places: Iterable[Place]) -> StorageError | None:
    """The StorageError for an OSError raised while writing under one of ``places`` (None if it was not)."""
    paths = [p for p in (exc.filename2, exc.filename) if isinstance(p, (str, os.PathLike))]
    places = list(places)
    for path in paths:
        for place in places:
            if place.holds(path):
                return StorageError(f"cannot write the {place.what}: {_reason(exc)} at {path}. {_fix(place)}")
    if exc.errno == errno.ENOSPC:  # a write() that names no file: the disk under one of our folders is full
        where = "; ".join(f"{p.what} {p.root} (moved by {p.moved_by})" for p in places)
        return StorageError(
            f"no space left on the device while writing ({exc}). Free space or move the folders "
            f"pytest-sme2 writes to a larger disk: {where}"
        )
    return None


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def _fix(place: Place) -> str:
    return f"Point {place.moved_by} at a folder you can write (with free space), or fix {place.root}"


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
