"""Reading a file someone else wrote: only a regular file, and never more of it than its kind can hold.

Why: device files, summaries and history files are paths a user (or a pull request, or a CI cache) hands us.
A FIFO there blocks ``open`` until a writer comes, ``/dev/zero`` never ends, and a 2 GB file read whole costs
seconds and gigabytes before any check can refuse it. So a reader first asks what kind of file it is (without
opening it for reading, which would block on a FIFO), then reads at most its bound plus one byte, and refuses
with the file's name and the bound. The message says which of these it was: "no file at X" for a FIFO sent
users looking for a typo that was not there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pytest_sme2.errors import UsageError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, as a message says it ("a FIFO (named pipe)"); "a regular file" for one."""
    return next((what for test, what in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else "not a file")


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
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}" if size % scale == 0 else f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def read_bounded(path: str | os.PathLike[str], limit: int, what: str, fix: str) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them; a UsageError naming ``what`` (e.g.
    "device file"), the path and the bound otherwise, ending with ``fix``. Opened non-blocking, so a FIFO
    swapped in after any earlier check is refused here rather than waited on; read up to one byte past the
    bound, so a file that grows while read is refused too and memory never holds more than the bound."""
    path = Path(path)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"the {what} {path} is {kind_of(info.st_mode)}, not a regular file: {fix}")
        if info.st_size > limit:
            raise UsageError(
                f"the {what} {path} is {size_text(info.st_size)}, above the {size_text(limit)} "
                f"a {what} can be: {fix}"
            )
        data = bytearray()
        while len(data) <= limit:  # a raw read may return less than asked before the end
            chunk = handle.read(limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    if len(data) > limit:
        raise UsageError(
            f"the {what} {path} grew past the {size_text(limit)} a {what} can be while it was read: " f"{fix}"
        )
    return bytes(data)
