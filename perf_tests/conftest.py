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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents and item.get_closest_marker("baseline") is None:
            item.add_marker(pytest.mark.baseline(missing="warn"))
