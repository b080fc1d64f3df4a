""".ci/wheel_smoke.py's two judgements: a wheel that lacks a file of the package, and a session that was not gated.

The smoke itself (a venv with torch, minutes) runs in .ci/run; these check what decides its verdict."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel_smoke() -> ModuleType:
    sys.path.insert(0, str(REPO / ".ci"))
    try:
        spec = importlib.util.spec_from_file_location("wheel_smoke", REPO / ".ci" / "wheel_smoke.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / ".ci"))


def test_a_file_of_the_package_the_wheel_lacks_is_named(wheel_smoke: ModuleType, tmp_path: Path) -> None:
    package = tmp_path / "pytest_sme2"
    for name in (
        "__init__.py",
        "run/native/CMakeLists.txt",
        "profile/devices/apple-m4.toml",
        "__pycache__/x.cpython-311.pyc",
    ):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    wheel = tmp_path / "p.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in ("pytest_sme2/__init__.py", "pytest_sme2/profile/devices/apple-m4.toml"):
            z.writestr(name, "")
    assert wheel_smoke.missing_from_wheel(wheel, package) == ["pytest_sme2/run/native/CMakeLists.txt"]


def _session(**test: object) -> dict:
    counted = {"variant": "emulated sme2=on", "emulated": True, "instructions": {"per_inference": 100740}}
    entry = {
        "nodeid": "perf_tests/test_smoke_net.py::test_smoke_net",
        "outcome": "passed",
        "profiles": [counted],
        "verdicts": [{"verdict": "ok", "message": "[ok] instructions within tolerance"}],
    }
    return {"tests": [{**entry, **test}]}


def test_a_counted_gated_session_passes_and_each_gap_is_said(wheel_smoke: ModuleType) -> None:
    problems = wheel_smoke.session_problems
    assert problems(_session()) == []
    assert problems(_session(verdicts=[])) == ["no baseline verdict: the gate did not judge the test"]
    assert problems(_session(verdicts=[{"verdict": "regression", "message": "m"}])) == ["verdict regression: m"]
    host = {"variant": "host", "emulated": False, "instructions": None}
    assert problems(_session(profiles=[host])) == ["profile 'host' was not counted on the emulated target"]
    assert problems(_session(outcome="skipped")) == ["perf_tests/test_smoke_net.py::test_smoke_net skipped"]
    assert problems({"tests": []}) == ["the session holds 0 tests with profiles, not the 1 perf test"]
