"""The one reader of a file someone else can write: only a regular file inside its tree, never more of it than
its kind can hold, refused before a byte is read.

Why one: baselines, both export caches, result-cache entries, summaries, device files, history files and session
folders are paths a user, a pull request or a restored CI cache hands us. A FIFO there blocks ``open`` until a
writer comes (a session hung forever, holding a cache lock), ``/dev/zero`` never ends, a link can lead anywhere
on disk, and a 2 GB file read whole costs seconds and gigabytes before any check can refuse it. Issue 52 added
those checks to some readers one by one and the others lacked them (issue 64), so every reader of these kinds
goes through :func:`open_checked` and its wrappers here, each kind with its bound and its fix in :data:`KINDS`
(the one table; ``tests/system/test_one_reader.py`` fails on a direct read elsewhere).

Order of checks, before reading: the path's real location must lie inside the tree given (a link out of it is
refused, as git refuses to follow links out of the work tree); it is opened non-blocking (a FIFO swapped in
after any earlier look is refused here, never waited on) and ``fstat`` must say a regular file no larger than
the bound; a whole read stops one byte past the bound, so a file that grows while read is refused too. The
message says which of these it was ("no file at X" for a FIFO sent users looking for a typo not there).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pytest_sme2.errors import UsageError

_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Kind:
    """A kind of file others can write: what a message calls it, the most bytes one can hold, and the fix."""

    what: str
    limit: int
    fix: str


# The one table of kinds and bounds. A bound is well above any honest file (a baseline of the largest bundled
# model is ~60 KB) and below what would hurt to hold or hash.
BASELINE = Kind(
    "baseline file",
    64 * MiB,
    "restore it (`git checkout -- FILE`) or record it again with --sme2-update-baselines",
)
DEVICE_FILE = Kind(
    "device file",
    1 * MiB,
    "give the path of a device file, a TOML text of a few KB (docs/device_model.md describes it)",
)
SUMMARY = Kind("session summary", 128 * MiB, "pass the summary.json a pytest-sme2 session wrote, or its session folder")
HISTORY = Kind(
    "history file",
    256 * MiB,
    "give the JSON Lines file sessions write with --sme2-history; start a new one when it grew this large",
)
EXPORT_RECORD = Kind(
    "export cache record",
    16 * MiB,
    "remove the cache entry's folder: it is exported again",
)
CACHE_FILE = Kind(
    "cache entry file",
    64 * GiB,
    "remove the cache entry's folder: it is exported or run again",
)
RESULT_RECORD = Kind("result cache record", 64 * MiB, "remove the result cache entry: the run is emulated again")
SESSION_FILE = Kind(
    "session file",
    4 * GiB,
    "pass a session folder a pytest-sme2 session wrote (.sme2/artifacts/session-...)",
)
PROGRAM = Kind("program", 64 * GiB, "export the model again (--sme2-fresh), or pass the .pte an export wrote")
PROJECT_CONFIG = Kind(
    "pytest configuration",
    4 * MiB,
    "give a project folder whose pytest.ini, pyproject.toml, tox.ini or setup.cfg is a text file",
)
COUNT_PROGRESS = Kind(
    "counting progress file",
    1 * MiB,
    "it is the counting plugin's own (two numbers); run the test again",
)
COUNT_RECORD = Kind(
    "counted-run record",
    1 * MiB,
    "remove it: it only guides the estimate before a counted run and is written again after the next one",
)
KINDS = (
    BASELINE,
    DEVICE_FILE,
    SUMMARY,
    HISTORY,
    EXPORT_RECORD,
    CACHE_FILE,
    RESULT_RECORD,
    SESSION_FILE,
    PROGRAM,
    PROJECT_CONFIG,
    COUNT_PROGRESS,
    COUNT_RECORD,
)


class RefusedFile(UsageError):
    """A file the one reader would not read; ``reason`` is the message without the fix, for callers whose own
    errors (a damaged cache entry, a broken baseline) add theirs."""

    def __init__(self, path: Path, kind: Kind, reason: str) -> None:
        super().__init__(f"the {kind.what} {path} {reason}: {kind.fix}")
        self.path = path
        self.reason = reason


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, as a message says it ("a FIFO (named pipe)"); "a regular file" for one."""
    return next(
        (what for test, what in _FILE_KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "not a file"
    )


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it exists and is not a regular file (after links, as ``open`` sees it); None for a
    regular file or nothing there (the caller has its own words for a missing file)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def size_text(size: int) -> str:
    """A byte count as a message shows a bound: ``1 MiB``, ``128 MiB``, ``2.0 GiB``, ``512 bytes``."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if size >= scale:
            return f"{size // scale} {unit}" if size % scale == 0 else f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def outside(path: str | os.PathLike[str], within: str | os.PathLike[str]) -> str | None:
    """Where ``path`` really leads when a link takes it out of the tree ``within``; None when it stays inside."""
    real, root = os.path.realpath(path), os.path.realpath(within)
    return None if real == root or real.startswith(root.rstrip(os.sep) + os.sep) else real


def open_checked(path: str | os.PathLike[str], kind: Kind, within: str | os.PathLike[str] | None = None) -> BinaryIO:
    """``path`` opened for reading (bytes) once it is a regular file inside ``within`` (when given) and
    within ``kind``'s bound; RefusedFile naming the file, the bound and the fix otherwise. FileNotFoundError and
    other OSErrors of ``open`` pass through: callers have their own words for a missing file."""
    path = Path(path)
    if within is not None:
        leads = outside(path, within)
        if leads is not None:
            raise RefusedFile(
                path,
                kind,
                f"is a link to {leads}, out of {within}, and pytest-sme2 reads no link that leaves its folder",
            )
    mode = os.stat(path).st_mode  # a socket cannot even be opened (ENXIO): refused by its kind first
    if not stat.S_ISREG(mode):
        raise RefusedFile(path, kind, f"is {kind_of(mode)}, not a regular file")
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    handle = os.fdopen(descriptor, "rb")
    try:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise RefusedFile(path, kind, f"is {kind_of(info.st_mode)}, not a regular file")
        if info.st_size > kind.limit:
            raise RefusedFile(
                path, kind, f"is {size_text(info.st_size)}, above the {size_text(kind.limit)} a {kind.what} can be"
            )
        os.set_blocking(handle.fileno(), True)
    except BaseException:
        handle.close()
        raise
    return handle


def read_bytes(path: str | os.PathLike[str], kind: Kind, within: str | os.PathLike[str] | None = None) -> bytes:
    """The bytes of the file at ``path``, checked by :func:`open_checked`; never more than ``kind``'s bound held."""
    with open_checked(path, kind, within) as handle:
        data = bytearray()
        while len(data) <= kind.limit:  # a raw read may return less than asked before the end
            chunk = handle.read(min(kind.limit + 1 - len(data), 16 * MiB))
            if not chunk:
                break
            data += chunk
    if len(data) > kind.limit:
        raise RefusedFile(
            Path(path), kind, f"grew past the {size_text(kind.limit)} a {kind.what} can be while it was read"
        )
    return bytes(data)


def read_text(
    path: str | os.PathLike[str],
    kind: Kind,
    within: str | os.PathLike[str] | None = None,
    *,
    errors: str = "strict",
) -> str:
    """The UTF-8 text of the file at ``path``, checked by :func:`open_checked` (UnicodeDecodeError with ``errors``
    strict, for callers that call such a file damaged)."""
    return read_bytes(path, kind, within).decode("utf-8", errors)
