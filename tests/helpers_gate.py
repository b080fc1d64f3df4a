"""The tiny-model perf test and update flags shared by the baseline-plugin and check-command tests, and the
one-model project the end-to-end gate tests write."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

PERF_TEST = """
import json, pytest

@pytest.mark.baseline(latency=5.0, shares=0.5)
@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    profile = etdump_profile(exported_pte, runner())
    with open("samples_{name}.json", "w") as out:
        json.dump(list(profile.e2e_ms), out)
"""

# These projects run a 30 us model 5 times: by design below the quality a baseline needs (10 undisturbed
# runs); the tests here are about the update/compare flow, so they write anyway (test_quality_* test refusal).
UPDATE = ("--sme2-update-baselines", "--sme2-accept-noisy-baselines")


def _test_file(name: str = "tiny", extra: str = "") -> str:
    return PERF_TEST.format(name=name) + extra


def write_model_project(
    pytester: pytest.Pytester, model: str, source: str, test: str, target: str, cache: Path
) -> None:
    """A project of one model file (models/<model>.py) and one perf test file, on ``target``, exporting into
    the shared ``cache``."""
    models = pytester.path / "models"
    models.mkdir(exist_ok=True)
    (models / f"{model}.py").write_text(source)
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        sme2_model_dirs = models
        sme2_target = {target}
        sme2_cache_dir = {cache}
        filterwarnings = ignore
        """)
    )
    pytester.makepyfile(**{f"test_{model}": test})
