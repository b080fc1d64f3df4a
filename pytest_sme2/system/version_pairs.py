"""The executorch and torch pairs pytest-sme2 is tested with (``make version-matrix``, .ci/version_matrix.py).

One table: pyproject.toml's ranges admit these pairs, the version matrix installs each in a fresh venv, and
``pytest-sme2 doctor``'s install lines name them. A pair's ``profiles`` says what it can do: executorch 1.4.1's wheel
has no C++ runtime for pytest-sme2's runner (run/native/build.py, ``runtime_problem``) and its Python binding no
event tracer (run/targets/host_worker.py, ``_no_etdump``), so it exports and checks programs but profiles none; its
smoke session fails at the emulated target's setup, by name. This module imports nothing, so the CI script loads it
by path without torch.
"""

from __future__ import annotations

from typing import NamedTuple


class TestedPair(NamedTuple):
    executorch: str
    torch: str
    profiles: bool  # whether runs are profiled (a runner or the binding writes an ETDump)


TESTED_PAIRS = (
    # ExecuTorch built 1.4.x against torch 2.13. Its wheel ships no runtime libraries and a binding without the
    # event tracer: exports (models and LLMs) work, profiles do not.
    TestedPair("1.4.1", "2.13.0", False),
    # ExecuTorch validated 1.5.x with torch 2.14; torch 2.13 beside it is the pairing this project has always run.
    TestedPair("1.5.1", "2.13.0", True),
    # TestedPair("1.5.1", "2.14.1", True): ExecuTorch's own pairing for 1.5.x, not tried: from PyPI torch 2.14.x
    # is only the CUDA build here (about 2.7 GB of nvidia-* packages beside it), and only 2.13.0+cpu lies on disk.
)
NEWEST = TESTED_PAIRS[-1]


def pair_for(executorch: str | None) -> TestedPair:
    """The tested pair of an installed executorch version ("1.4.1+cpu" -> the 1.4.1 pair), else the newest."""
    release = (executorch or "").split("+")[0]
    return next((pair for pair in TESTED_PAIRS if pair.executorch == release), NEWEST)


def pairs_text() -> str:
    """The pairs as a person reads them: "executorch 1.4.1 (exports only) or 1.5.1, with torch 2.13.0"."""
    parts = [f"{p.executorch}{'' if p.profiles else ' (exports only)'}" for p in TESTED_PAIRS]
    torches = sorted({p.torch for p in TESTED_PAIRS})
    return f"executorch {' or '.join(parts)}, with torch {' or '.join(torches)}"
