"""The perf suite's costliest-first order lists every test file of perf_tests/: a file left out sorts last, and
under pytest-xdist its exports and counted runs would start last and run on one core while the other idles."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _perf_conftest():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("perf_tests_conftest", REPO / "perf_tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_perf_test_file_has_a_place_in_the_costliest_first_order() -> None:
    files = {path.name for path in (REPO / "perf_tests").glob("test_*.py")}
    listed = _perf_conftest().COSTLIEST_FIRST
    assert len(set(listed)) == len(listed), listed
    assert files - set(listed) == set(), "add these to COSTLIEST_FIRST in perf_tests/conftest.py by their cost"
    assert set(listed) - files == set(), "COSTLIEST_FIRST names files perf_tests/ no longer has"
