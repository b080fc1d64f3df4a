"""The executorch and torch pairs pytest-sme2 is tested with (``make version-matrix``, .ci/version_matrix.py).

One table: pyproject.toml's ranges admit these pairs, the version matrix installs each in a fresh venv, and
``pytest-sme2 doctor``'s install lines name them. A pair's ``targets`` says where it runs: executorch 1.4.1's wheel
has no C++ runtime for pytest-sme2's runner (run/native/build.py, ``runtime_problem``), so it runs on the host
target only. This module imports nothing, so the CI script loads it by path without torch.
"""

from __future__ import annotations

from typing import NamedTuple


class TestedPair(NamedTuple):
    executorch: str
    torch: str
    targets: str  # where the smoke session runs: "all" or "host"


TESTED_PAIRS = (
    # ExecuTorch built 1.4.x against torch 2.13. Its wheel ships no runtime libraries: the host target only.
    TestedPair("1.4.1", "2.13.0", "host"),
    # ExecuTorch validated 1.5.x with torch 2.14; torch 2.13 beside it is the pairing this project has always run.
    TestedPair("1.5.1", "2.13.0", "all"),
    # TestedPair("1.5.1", "2.14.1", "all"): ExecuTorch's own pairing for 1.5.x, not tried: from PyPI torch 2.14.x
    # is only the CUDA build here (about 2.7 GB of nvidia-* packages beside it), and only 2.13.0+cpu lies on disk.
)
NEWEST = TESTED_PAIRS[-1]


def pair_for(executorch: str | None) -> TestedPair:
    """The tested pair of an installed executorch version ("1.4.1+cpu" -> the 1.4.1 pair), else the newest."""
    release = (executorch or "").split("+")[0]
    return next((pair for pair in TESTED_PAIRS if pair.executorch == release), NEWEST)


def tested_text() -> str:
    """The pairs as a person reads them: "executorch 1.4.1 (host target only) or 1.5.1, each with torch 2.13.0"."""
    parts = [f"{p.executorch}{' (host target only)' if p.targets == 'host' else ''}" for p in TESTED_PAIRS]
    torches = sorted({p.torch for p in TESTED_PAIRS})
    return f"executorch {' or '.join(parts)}, with torch {' or '.join(torches)}"
