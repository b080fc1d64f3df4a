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
    # ExecuTorch's own pairing for 1.5.x. From PyPI torch 2.14.1 is the CUDA build here (2.14.1+cu130, a 6.2 GB venv);
    # its smoke session passed on 2026-12-03 with every count equal to the baselines recorded under 2.13.0.
    TestedPair("1.5.1", "2.14.1", True),
)
# The newest executorch's first pair: its torch is the one with a CPU build on PyPI for Python 3.11 here.
NEWEST = next(p for p in TESTED_PAIRS if p.executorch == TESTED_PAIRS[-1].executorch)


def pair_for(executorch: str | None) -> TestedPair:
    """The tested pair of an installed executorch version ("1.4.1+cpu" -> the 1.4.1 pair), else the newest."""
    release = (executorch or "").split("+")[0]
    return next((pair for pair in TESTED_PAIRS if pair.executorch == release), NEWEST)


def pairs_text() -> str:
    """The pairs as a person reads them: "executorch 1.4.1 with torch 2.13.0 (exports only); executorch 1.5.1 with
    torch 2.13.0 or 2.14.1"."""
    torches: dict[tuple[str, bool], list[str]] = {}
    for pair in TESTED_PAIRS:
        torches.setdefault((pair.executorch, pair.profiles), []).append(pair.torch)
    return "; ".join(
        f"executorch {executorch} with torch {' or '.join(versions)}{'' if profiles else ' (exports only)'}"
        for (executorch, profiles), versions in torches.items()
    )
