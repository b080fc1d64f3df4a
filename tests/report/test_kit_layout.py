"""The session folder under the reference kit's documented names (issue 15, item 4).

The names checked here are the ones the kit's scripts document and read (manifest.json with model,
output_root, executorch and results of experiment/mode/artifacts; metrics.json with latency_ms and
median_ms; *.etdump; *_kernels.csv with has_sme2; sme2_on/sme2_off in paths; model_id per variant),
written down from the kit's validate_results.py and analyze_etdump_csv.py usage, not its code.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

PAIR = """
import pytest

@pytest.mark.model("tiny")
def test_pair(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
    etdump_profile(exported_pte, runner(sme2=False))
"""


@pytest.fixture
def session_dir(sme2_project: pytest.Pytester) -> Path:
    sme2_project.makepyfile(PAIR)
    sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "-p", "no:cacheprovider").assert_outcomes(
        passed=1
    )
    [session] = (sme2_project.path / "artifacts").glob("session-*")
    return session


def _resolve(run_dir: Path, artifact: dict) -> Path:
    path = Path(artifact["path"])
    return path if path.is_absolute() else run_dir / path


def test_manifest_and_metrics_have_the_kits_keys_and_every_artifact_resolves(session_dir: Path) -> None:
    manifest = json.loads((session_dir / "manifest.json").read_text())
    assert {"model", "output_root", "executorch", "results"} <= set(manifest)
    assert manifest["executorch"]["patches_required"] is False and manifest["executorch"]["compatible"] is True
    timing = [r for r in manifest["results"] if r["mode"] == "timing"]
    assert len(timing) == 2
    for result in timing:
        for key in ("etdump", "timeline_all", "robust_stats"):
            assert _resolve(session_dir, result["artifacts"][key]).is_file(), (result["experiment"], key)
    metrics = json.loads((session_dir / "metrics.json").read_text())
    for result in metrics["results"]:
        assert result["mode"] == "timing" and len(result["metrics"]["latency_ms"]) == 5
        assert isinstance(result["metrics"]["median_ms"], float)
    assert {r["experiment"] for r in metrics["results"]} == {r["experiment"] for r in timing}


def test_etdumps_variants_and_model_ids_as_the_kit_finds_them(session_dir: Path) -> None:
    kit_named = list(session_dir.glob("**/*.etdump"))
    assert len(kit_named) == 2
    # the timed ETDump under the kit's name, not a second copy of its bytes (issue 64: 86 MB stored twice)
    assert all(os.path.samefile(path, path.parent / "timed.etdp") for path in kit_named)
    folders = sorted(p.name for p in session_dir.glob("*/*-profile-*"))
    assert any("sme2_off" in name for name in folders) and not any("sme2=" in name for name in folders)
    model_ids = set()
    for timeline in session_dir.glob("**/*_all_runs_timeline.csv"):
        with open(timeline, newline="") as handle:
            model_ids |= {row["model_id"] for row in csv.DictReader(handle)}
    assert len(model_ids) == 2  # SME2 off and the target's default no longer share one model_id
    assert any("sme2_off" in m for m in model_ids)


def test_emulated_times_are_not_written_where_the_kits_tools_read_latency(tmp_path: Path) -> None:
    from helpers_etdump import execute_only

    from pytest_sme2.report import kit_layout
    from pytest_sme2.report.csv_export import write_csvs

    etdump = execute_only(tmp_path / "timed.etdp", [300_000_000])  # 300 ms of emulator time
    written = write_csvs(etdump, tmp_path, "m_fp32_emulated_sme2_on", "m fp32 [emulated sme2_on]", emulated=True)
    assert sorted(Path(p).name for p in written.values()) == [
        "m_fp32_emulated_sme2_on_emulated_events.csv",
        "m_fp32_emulated_sme2_on_emulated_ops.csv",
    ]
    assert not list(tmp_path.glob("*_all_runs_timeline.csv")) and not list(tmp_path.glob("*_ops_stats.csv"))
    record = {
        "nodeid": "t::e",
        "profiles": [
            {
                "model": "m",
                "variant": "emulated sme2=on threads=1",
                "emulated": True,
                "instructions": {"per_inference": 123},
                "artifacts": {},
            }
        ],
    }
    [result] = kit_layout.metrics([record])["results"]
    assert result["mode"] == "instructions" and "latency_ms" not in result["metrics"]
