"""The sha256 of a file's bytes: what cache keys and cache entries are checked by.

Why one function: the export cache, the result cache and a profile's provenance all name a file by
its content; reading it in 1 MiB chunks keeps a large program or library out of memory.
"""

from __future__ import annotations

import hashlib
import os


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
