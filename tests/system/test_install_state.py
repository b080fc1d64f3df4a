"""`make install` skips pip only when this checkout is installed editable with every requirement met (issue 25).

Each case runs the script as the Makefile does (by path, in a fresh Python) with a made-up installed
pytest-sme2 (a dist-info folder first on the path) over a copy of pyproject.toml, then changes one thing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "pytest_sme2" / "system" / "install_state.py"
TORCH = metadata.version("torch")
PYPROJECT = """
[project]
name = "pytest-sme2"
version = "0.1.0"
dependencies = ["numpy>=1.24", "pytest>=8"]

[project.optional-dependencies]
test = ["pluggy>=1"]

[project.scripts]
pytest-sme2 = "pytest_sme2.cli:main"

[project.entry-points.pytest11]
sme2 = "pytest_sme2.plugin"
"""


def _installed(
    site: Path,
    root: Path,
    requires: list[str],
    editable: bool = True,
    version: str = "0.1.0",
    plugin: str = "pytest_sme2.plugin",
) -> None:
    """A pytest_sme2 dist-info as pip writes it for `pip install -e ROOT[test]`."""
    info = site / f"pytest_sme2-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: pytest-sme2", f"Version: {version}", "Provides-Extra: test"]
    lines += [f"Requires-Dist: {req}" for req in requires] + ['Requires-Dist: pluggy>=1; extra == "test"']
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\npytest-sme2 = pytest_sme2.cli:main\n\n" f"[pytest11]\nsme2 = {plugin}\n"
    )
    (info / "direct_url.json").write_text(json.dumps({"url": root.as_uri(), "dir_info": {"editable": editable}}))


def _check(site: Path, root: Path, torch: str = TORCH) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "--torch", torch, "--extra", "test"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path / "site", root


def test_an_unchanged_install_is_up_to_date(project: tuple[Path, Path]) -> None:
    site, root = project
    _installed(site, root, ["numpy>=1.24", "pytest>=8"])
    result = _check(site, root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout and "nothing to install" in result.stdout


@pytest.mark.parametrize(
    "change, reason",
    [
        ("dependency added", "the dependencies in {root}/pyproject.toml changed since pytest-sme2 was installed"),
        ("requirement unmet", "numpy {numpy} is installed, pyproject.toml asks for numpy>=999"),
        ("extra unmet", "pluggy {pluggy} is installed, pyproject.toml asks for pluggy>=999"),
        ("entry point", "the entry points in {root}/pyproject.toml changed since pytest-sme2 was installed"),
        ("version", "pytest-sme2 0.0.9 is installed, {root}/pyproject.toml says 0.1.0"),
        ("not editable", "pytest-sme2 is not installed editable from {root}"),
        ("other checkout", "pytest-sme2 is not installed editable from {root}"),
        ("torch pin", "torch {torch} is installed, the Makefile pins 2.12.0"),
    ],
)
def test_each_change_asks_for_an_install_and_says_why(project: tuple[Path, Path], change: str, reason: str) -> None:
    site, root = project
    requires, kwargs, torch = ["numpy>=1.24", "pytest>=8"], {}, TORCH
    text = PYPROJECT
    if change == "dependency added":
        text = text.replace('"pytest>=8"]', '"pytest>=8", "scipy>=1.10"]')
    elif change == "requirement unmet":
        text, requires = text.replace("numpy>=1.24", "numpy>=999"), ["numpy>=999", "pytest>=8"]
    elif change == "extra unmet":
        text = text.replace("pluggy>=1", "pluggy>=999")
    elif change == "entry point":
        kwargs["plugin"] = "pytest_sme2.old_plugin"
    elif change == "version":
        kwargs["version"] = "0.0.9"
    elif change == "not editable":
        kwargs["editable"] = False
    elif change == "torch pin":
        torch = "2.12.0"
    (root / "pyproject.toml").write_text(text)
    if change == "other checkout":
        other = root.parent / "other"
        other.mkdir()
        _installed(site, other, requires)
    else:
        _installed(site, root, requires, **kwargs)
    result = _check(site, root, torch)
    assert result.returncode == 1, result.stdout + result.stderr
    expected = reason.format(root=root, torch=TORCH, numpy=metadata.version("numpy"), pluggy=metadata.version("pluggy"))
    assert result.stdout == f"install: {expected}; installing\n"
