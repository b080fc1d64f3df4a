"""The tested executorch/torch pairs and what an executorch without a runtime for the runner is told."""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.run.native import build
from pytest_sme2.system.version_pairs import NEWEST, TESTED_PAIRS, pair_for, pairs_text


def test_each_installed_version_finds_its_pair_and_others_the_newest():
    assert pair_for("1.4.1+cpu").executorch == "1.4.1" and pair_for("1.4.1+cpu").torch == "2.13.0"
    assert pair_for("1.5.1") == next(p for p in TESTED_PAIRS if p.executorch == "1.5.1")
    assert pair_for("9.9.9") == NEWEST and pair_for(None) == NEWEST
    assert pairs_text() == (
        "executorch 1.4.1 with torch 2.13.0 (exports only); executorch 1.5.1 with torch 2.13.0 or 2.14.1"
    )


def test_a_wheel_without_runtime_libraries_is_named_with_the_version_that_has_them(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(build, "executorch_release", lambda version=None: "1.4.1")
    (tmp_path / "extension" / "pybindings").mkdir(parents=True)  # 1.4.1's layout: the binding, no lib/
    problem = build.runtime_problem(tmp_path)
    assert problem is not None
    assert problem.startswith("executorch 1.4.1's wheel ships no C++ runtime libraries")
    assert "needs executorch 1.5.1" in problem and "pip install executorch==1.5.1" in problem
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libexecutorch.so").write_bytes(b"")  # 1.5.1's layout
    assert build.runtime_problem(tmp_path) is None
