"""File-system-safe names for test ids and variants: one name per text, distinct texts never share one.

Baseline files, artifact folders and verdict files are named from test ids that may hold ``/``, ``::``,
``[...]`` or shell metacharacters; the baseline store, the gate and the session all name them here.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]+")
_HASH_MARK = "~"  # never in a cleaned name, so hashed and plain names cannot meet


def clean(text: str) -> str:
    """``text`` with every run of characters unsafe in a file name replaced by ``_`` (may be empty)."""
    return _UNSAFE.sub("_", text).strip("_.")


def slug(text: str, limit: int = 120) -> str:
    """A file-system-safe, readable name for a test id or variant, distinct for distinct texts.

    A text that is already safe and short is its own name. Any other text (a
    test id with ``/``, ``::`` or ``[...]``, shell metacharacters, ``..``)
    is cleaned for reading and given ``~`` and a hash of the original text, so
    ``test[a/b]`` and ``test[a_b]`` get different folders and baseline files
    by construction rather than by luck.
    """
    cleaned = clean(text)
    if cleaned == text and 0 < len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned[:max(limit - len(digest) - 1, 1)] or 'unnamed'}{_HASH_MARK}{digest}"
