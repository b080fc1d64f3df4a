"""A tiny third-party distribution on a folder of the path, as pip leaves one: what importlib.metadata reads for
entry points (the targets' and the checks' registries)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def install(site: Path, distribution: str, module: str, source: str, entry_points: str) -> Path:
    """``module`` and a dist-info for ``distribution`` in ``site``, as pip leaves them: what importlib.metadata
    reads."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return site
