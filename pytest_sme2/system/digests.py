"""The sha256 of a file's bytes, and of a source tree: what cache keys and cache entries are checked by.

Why one module: the export cache, the result cache and a profile's provenance all name a file by
its content; reading it in 1 MiB chunks keeps a large program or library out of memory. Both caches
also key on the code that computes their answer (a source tree's digest), so an upgrade or an edit of
that code is a miss, never a stale answer.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from pytest_sme2.system.regular_files import CACHE_FILE, Kind, open_checked


def file_sha256(
    path: str | os.PathLike[str], kind: Kind = CACHE_FILE, within: str | os.PathLike[str] | None = None
) -> str:
    """The sha256 of the regular file at ``path``, read through the one reader (system/regular_files.py): a FIFO
    in a cache entry (a tar archive can restore one) is refused as RefusedFile at once instead of hanging the
    session, and the cache lock held around the check with it; a file over ``kind``'s bound or a link out of
    ``within`` likewise."""
    digest = hashlib.sha256()
    with open_checked(path, kind, within) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(root: str | os.PathLike[str], suffixes: tuple[str, ...]) -> str:
    """sha256 of every file under ``root`` whose name ends in one of ``suffixes`` (relative path and bytes,
    in sorted order; ``__pycache__`` left out): what a cache keys "the code that computes the answer" by."""
    return _tree_digest(str(Path(root).resolve()), tuple(suffixes))


@functools.lru_cache(maxsize=8)
def _tree_digest(root: str, suffixes: tuple[str, ...]) -> str:
    # Once per process and tree: the package does not change under a running session.
    digest = hashlib.sha256()
    base = Path(root)
    for path in sorted(
        p for p in base.rglob("*") if p.suffix in suffixes and p.is_file() and "__pycache__" not in p.parts
    ):
        digest.update(str(path.relative_to(base)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()
