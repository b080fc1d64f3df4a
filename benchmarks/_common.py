"""Shared setup for benchmark scripts: a session on the bundled models and machine facts."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from pytest_sme2.measure.session import Settings, Sme2Session
from pytest_sme2.run.cpu import host_cpu

REPO = Path(__file__).resolve().parent.parent
MODELS = ("toy_cnn", "mlp", "mobilenet_v3_small", "transformer_encoder")


def session(root: Path) -> Sme2Session:
    sess = Sme2Session(Settings(target="host", cache_dir=root / "cache", session_dir=root / "artifacts"))
    sess.registry.register_dir(REPO / "models")
    return sess


def machine() -> str:
    cpu = host_cpu()
    import executorch.version
    import torch

    return (
        f"{time.strftime('%Y-%m-%d')}, {cpu.name} ({cpu.arch}), {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}, executorch {executorch.version.__version__}"
    )


def progress_record(line: str, record: dict, json_path: Path | None) -> None:
    """Print one result line at once and rewrite the JSON record with everything so far: a long probe killed
    midway keeps what it measured."""
    import json

    print(line, flush=True)
    if json_path:
        json_path.write_text(json.dumps(record, indent=1) + "\n")
