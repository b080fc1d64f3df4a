"""Writing files in folders other people (or other programs) can write to, without following their links.

Why: pytest-sme2 writes into temp folders, session folders (shared as CI artifacts and read back
by ``pytest-sme2 report``), caches and history files. Anyone who can write such a folder can plant
a symlink where we are about to write (``summary.md -> ~/.bashrc``) or create the folder first.
The one rule, used by every writer in the package (docs/history.md, "Files in shared folders"):

- a whole file is written to a fresh temp file beside it (created with ``O_EXCL``, so never an
  existing file or link) and renamed over the name: a rename replaces a planted link, never its
  target, and readers never see half a file;
- a file we must keep open (locks, appended logs) is opened with ``O_NOFOLLOW``;
- a folder that must be ours (per-user temp folders) is created ``0700`` and checked: a real
  folder, owned by us, writable by nobody else.

Files get the permissions the user's umask gives (a cache shared by a group under umask 002 stays
shared), unlike ``tempfile.mkstemp``'s fixed 0600. Kept by hand rather than a library: the
atomic-write packages on PyPI follow links at the temp name or fix the mode at 0600.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import BinaryIO, Callable

from pytest_sme2.errors import StorageError
from pytest_sme2.system.regular_files import CACHE_FILE, Kind, kind_of, open_checked


def write_file(path: str | os.PathLike[str], data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``data`` atomically, never writing through a link at ``path``."""
    payload = data.encode(encoding) if isinstance(data, str) else data
    return _replace(Path(path), lambda out: out.write(payload))


def write_streamed(path: str | os.PathLike[str], fill: Callable[[BinaryIO], object]) -> Path:
    """Replace ``path`` with what ``fill`` writes into the open file, atomically, never through a link at
    ``path``: for a file too large to hold as one string first (a many-run session's timeline CSV)."""
    return _replace(Path(path), fill)


def copy_file(source: str | os.PathLike[str], destination: str | os.PathLike[str], kind: Kind = CACHE_FILE) -> Path:
    """Replace ``destination`` with a copy of ``source`` (never a link to it), never writing through a
    link at ``destination``. Artifacts are copies: writing one must not rewrite a cache entry. ``source`` is
    read through the one reader as a file of ``kind`` (a FIFO in a cache entry is refused, not waited on)."""
    with open_checked(source, kind) as origin:
        return _replace(Path(destination), lambda out: shutil.copyfileobj(origin, out, 1 << 20))


def _replace(path: Path, fill: Callable[[BinaryIO], object]) -> Path:
    """Fill a temp file created exclusively beside ``path`` (a random name, ``O_EXCL|O_NOFOLLOW``, the
    mode the umask gives) and rename it over ``path``."""
    if path.is_dir() and not path.is_symlink():
        raise StorageError(f"cannot write {path}: it is a folder; give a file path or remove the folder")
    temporary = path.with_name(f".{path.name[:60]}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as out:
            fill(out)
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk's write() names no file: name it
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return path


def open_no_follow(path: str | os.PathLike[str], flags: int, mode: int = 0o666) -> int:
    """``os.open`` that refuses a symlink at ``path`` with a StorageError naming it (never opens its target)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StorageError(
                f"refusing to open {path}: it is a symbolic link, and pytest-sme2 never writes "
                "through links in shared folders. Remove the link (someone else may have "
                "planted it) and run again"
            ) from None
        raise


def append_lines(path: str | os.PathLike[str], lines: list[str], *, sync: bool = True) -> None:
    """Append whole text lines to ``path`` (created if missing, never through a link) and, with ``sync``,
    flush them to disk (records; a log written twice a second skips it). A file whose last line has no
    newline (cut short by a crash or ``head -c``) gets one first, so the damaged line stays one line and
    never swallows the first new record (history files)."""
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    handle = open_no_follow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK)
    mode = os.fstat(handle).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which refuses a FIFO as "not seekable", naming no file
        os.close(handle)
        raise StorageError(
            f"cannot append to {path}: it is {kind_of(mode)}, not a regular file; give the path "
            "of a regular file (created if missing)"
        )
    with os.fdopen(handle, "r+b") as out:
        size = out.seek(0, os.SEEK_END)
        if size:
            out.seek(size - 1)
            if out.read(1) != b"\n":
                text = "\n" + text
        out.write(text.encode("utf-8"))
        out.flush()
        if sync:
            os.fsync(out.fileno())


def private_folder(path: str | os.PathLike[str]) -> Path:
    """``path`` as a folder only this user can write: created ``0700`` if missing, else checked.

    For per-user state under a shared temp folder (device claims): a folder someone else
    created first, a link, or one others can write is refused with the fix, never used.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    problem = None
    if stat.S_ISLNK(info.st_mode):
        problem = "it is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        problem = "it is not a folder"
    elif info.st_uid != os.getuid():
        problem = f"it belongs to user id {info.st_uid}, not to you ({os.getuid()})"
    elif info.st_mode & 0o022:
        problem = f"others can write it (mode {stat.S_IMODE(info.st_mode):o})"
    if problem:
        raise StorageError(
            f"refusing to use {path}: {problem}. pytest-sme2 keeps per-user state there and "
            f"another user could plant links in it; remove it, or set TMPDIR to a folder of "
            f"your own"
        )
    return path
