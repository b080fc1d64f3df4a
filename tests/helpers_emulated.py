"""Counted profiles of one real program under emulation, for tests that need its exact counts.

One place for what four tests did alike: skip without the emulated target, register the bundled models or
write a test's own model file, export it, count one run per SME2 setting, close the session; and one place
for what "a cached answer equals a fresh run" compares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest

REPO = Path(__file__).resolve().parent.parent


def counted_profiles(
    root: Path,
    model: str,
    sme2s: Sequence[bool],
    *,
    source: str | None = None,
    recipe: object | None = None,
    fresh: bool = False,
    warmup: int = 0,
    cache: Path | None = None,
) -> list:
    """Profiles of ``model`` (a bundled one, or ``source`` written to ``root``/models) counted once per entry of
    ``sme2s`` on the emulated target, with the export and result caches in ``cache`` (the run's shared one) or
    else in ``root``. ``fresh``: every run emulated, none answered from the result cache (two runs of one
    setting then count twice)."""
    from pytest_sme2 import Recipe
    from pytest_sme2.measure.runner import Runner
    from pytest_sme2.measure.session import Settings, Sme2Session
    from pytest_sme2.run import emulation_setup
    from pytest_sme2.run.targets import RunSpec

    status = emulation_setup.status()
    if not status.ready:
        pytest.skip(f"emulated target not ready: {status.problem}")
    models = REPO / "models"
    if source is not None:
        models = root / "models"
        models.mkdir(parents=True, exist_ok=True)
        (models / f"{model}.py").write_text(source)
    session = Sme2Session(
        Settings(
            target="emulated",
            cache_dir=cache or root / "cache",
            session_dir=root / "run",
            target_options={"fresh": fresh},
        )
    )
    session.registry.register_dir(models)
    try:
        exported = session.export(model, recipe or Recipe())
        return [
            Runner(session, RunSpec(sme2=sme2, runs=1, warmup=warmup), session.test_dir(f"run-{i}")).profile(exported)
            for i, sme2 in enumerate(sme2s)
        ]
    finally:
        session.close()


# Every counted quantity a profile's dict carries: a cached answer must give each of them exactly.
COUNTED = (
    "per_inference",
    "sme_per_inference",
    "sme_share_of_conv_gemm",
    "shares",
    "delegation_coverage",
    "sme_path_share",
    "ops",
    "sme_kernels",
    "op_identity",
    "load",
    "init",
    "mix",
)


def assert_cached_equals_fresh(fresh: Sequence, cached: Sequence) -> None:
    """``cached[i]`` (answered from the result cache) equals ``fresh[i]`` (emulated and stored) in every counted
    quantity, the shares and the SME kernels that ran; both name the same cache entry."""
    assert len(fresh) == len(cached)
    for a, b in zip(fresh, cached):
        assert a.metadata["result_cache"]["cached"] is False and b.metadata["result_cache"]["cached"] is True
        assert a.metadata["result_cache"]["key"] == b.metadata["result_cache"]["key"]
        counted_a, counted_b = a.to_dict()["instructions"], b.to_dict()["instructions"]
        assert set(COUNTED) <= set(counted_a)
        assert json.dumps(counted_a, sort_keys=True) == json.dumps(counted_b, sort_keys=True)
        assert a.executed_sme_kernels == b.executed_sme_kernels
        assert a.to_dict()["shares"] == b.to_dict()["shares"]


def newest_session(project: Path) -> Path:
    """The newest session folder under ``project``'s default artifacts folder: its progress.log has the progress
    lines a terminal shows, run by run, also for runs in xdist workers."""
    return sorted((project / ".sme2" / "artifacts").glob("session-*/"), key=lambda p: p.stat().st_mtime)[-1]
