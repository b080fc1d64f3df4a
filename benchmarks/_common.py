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
