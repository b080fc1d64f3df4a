"""Baseline policy of the repo's own perf suite (`pytest perf_tests/ -m sme2`).

Baselines are per machine (target fingerprint: host, device, emulator, SME2 or
not), and a fresh checkout on a new machine or CI runner has none for it. So
here a missing baseline warns, with the command that records it, instead of
failing the suite; a regression against a baseline that exists still fails.
Projects that commit their baselines keep the plugin's default,
``sme2_baseline_missing = fail``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# Costliest first, so that under pytest-xdist (make perf on the emulated target) the last test to start is a short
# one. Export and counted runs per file in a cold session (stop 37, 2-core machine): mobilenet 214 s, transformer
# 93 s, mlp 97 s (three quick exports), toy_cnn 32 s. In file order transformer int8 (49 s) started last and one
# worker ran alone for its last 62 s of 252 (benchmarks/results/notebook.md). The tiny Llama's file came later and,
# not listed, sorted last: its 8da4w export (37 s) and counted runs started last and ran alone (2026-11-29, its
# three exports 72 s and runs about 35 s). tests/test_perf_suite_order.py fails for a file not listed here.
COSTLIEST_FIRST = (
    "test_efficient_sam.py",
    "test_mobilenet_v3_small.py",
    "test_tiny_llama.py",
    "test_transformer_encoder.py",
    "test_mlp.py",
    "test_toy_cnn.py",
)


def _cost_rank(item: pytest.Item) -> int:
    name = Path(item.path).name
    return COSTLIEST_FIRST.index(name) if name in COSTLIEST_FIRST else len(COSTLIEST_FIRST)


REAL_SIZE = "real_size"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-size",
        action="store_true",
        help="also run the perf tests marked real_size: real models at the size they ship (make perf-real; "
        "under emulation these take far longer than the rest: docs/performance.md, 'Real models')",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{REAL_SIZE}: a real model at its real size; runs only with --real-size")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--real-size"):
        real = [item for item in items if item.get_closest_marker(REAL_SIZE) is not None]
        if real:
            config.hook.pytest_deselected(items=real)
            items[:] = [item for item in items if item.get_closest_marker(REAL_SIZE) is None]
    items.sort(key=_cost_rank)  # stable: a file's tests keep their order
    for item in items:
        if HERE in Path(item.path).resolve().parents and item.get_closest_marker("baseline") is None:
            item.add_marker(pytest.mark.baseline(missing="warn"))
