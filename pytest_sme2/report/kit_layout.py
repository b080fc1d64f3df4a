"""A session folder the reference kit's tools can be pointed at: its manifest and metrics, .etdump names.

The kit (ArmDeveloperEcosystem/sme-executorch-profiling, ``model_profiling/scripts``) reads a run
folder by documented names: ``manifest.json`` (``model``, ``output_root``, ``executorch``, and
``results`` of ``experiment``/``mode``/``artifacts``, a timing result's artifacts ``etdump``,
``timeline_all`` and ``robust_stats`` each a ``path``), ``metrics.json`` (``results`` with
``metrics``: ``latency_ms`` samples and ``median_ms``), ETDumps named ``*.etdump``, kernel
CSVs ``*_kernels.csv`` with ``has_sme2``, and SME2 on and off told apart by ``sme2_on`` /
``sme2_off`` in paths. Emulated profiles are written as ``mode: "instructions"`` with their
counted instructions, never as timing: emulated time is not hardware time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_sme2.measure.session import kit_variant
from pytest_sme2.system.safe_files import write_file

MANIFEST = "manifest.json"
METRICS = "metrics.json"


def experiment(test_entry: Mapping[str, Any], profile: Mapping[str, Any]) -> str:
    return f"{test_entry['nodeid']} [{kit_variant(profile['variant'])}]"


def _result_artifacts(profile: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    artifacts = profile.get("artifacts") or {}
    wanted = {
        "etdump": "kit_etdump",
        "timeline_all": "timeline_csv",
        "robust_stats": "robust_stats",
        "ops_stats": "ops_stats_csv",
        "kernel_csv": "kernels_csv",
    }
    return {kit: {"path": artifacts[ours]} for kit, ours in wanted.items() if artifacts.get(ours)}


def manifest(
    test_entries: Sequence[Mapping[str, Any]], session_dir: Path, versions: Mapping[str, str]
) -> dict[str, Any]:
    models = sorted({p["model"] for r in test_entries for p in r["profiles"]})
    results = []
    for test_entry in test_entries:
        for profile in test_entry["profiles"]:
            results.append(
                {
                    "experiment": experiment(test_entry, profile),
                    "model": profile["model"],
                    "mode": "instructions" if profile.get("emulated") else "timing",
                    "artifacts": _result_artifacts(profile),
                }
            )
    return {
        "model": models[0] if len(models) == 1 else ", ".join(models),
        "output_root": str(session_dir),
        "tool": "pytest-sme2",
        # the wheels pytest-sme2 ran: no patched ExecuTorch or XNNPACK build is needed or used
        "executorch": {"version": versions.get("executorch"), "compatible": True, "patches_required": False},
        "results": results,
    }


def metrics(test_entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    results = []
    for test_entry in test_entries:
        for profile in test_entry["profiles"]:
            if profile.get("emulated"):
                counted = profile.get("instructions") or {}
                values = {
                    "instructions_per_inference": counted.get("per_inference"),
                    "sme_instructions_per_inference": counted.get("sme_per_inference"),
                }
                mode = "instructions"
            else:
                values = {
                    "latency_ms": profile.get("e2e_ms") or [],
                    "median_ms": (profile.get("latency") or {}).get("median_ms"),
                }
                mode = "timing"
            results.append({"experiment": experiment(test_entry, profile), "mode": mode, "metrics": values})
    return {"results": results}


def write(test_entries: Sequence[Mapping[str, Any]], session_dir: Path) -> dict[str, Path]:
    """manifest.json and metrics.json in the session folder."""
    versions = next(((p.get("metadata") or {}).get("export") or {} for r in test_entries for p in r["profiles"]), {})
    paths = {}
    for name, data in ((MANIFEST, manifest(test_entries, session_dir, versions)), (METRICS, metrics(test_entries))):
        path = session_dir / name
        write_file(path, json.dumps(data, indent=1, default=str) + "\n")
        paths[name.split(".")[0]] = path
    return paths
