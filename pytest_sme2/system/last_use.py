"""When a cache entry was last used: the modification time of its record file, which every hit touches.

Why a record file's mtime and not the access time: atime is unreliable (``noatime`` and ``relatime`` mounts
update it rarely or never), and an entry's data files are read-only hard links shared with session folders.
Each entry has one record that is whole and written once (the export cache's ``export.json``, the result
cache's ``result.json``); its mtime is when the entry was made, and a hit sets it to now, so the least
recently used entry is the one whose record is oldest (``pytest-sme2 cache prune``, system/prune.py). The
digests never cover times, so touching a record changes no check.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def mark_used(record: Path) -> None:
    """Set ``record``'s mtime to now, on the file itself, never through a link at its name (``utime`` without
    following). Best effort: a record another user owns (a group cache) or a read-only cache keeps its time,
    and the entry is then as old as its last use by its owner."""
    with contextlib.suppress(OSError):
        os.utime(record, follow_symlinks=False)


def last_used(record: Path, entry: Path) -> float:
    """When the entry ``entry`` was last used: ``record``'s mtime, never following a link; the entry's own when
    its record is missing (half an entry, a damaged one: as old as it is)."""
    for path in (record, entry):
        with contextlib.suppress(OSError):
            return os.lstat(path).st_mtime
    return 0.0
