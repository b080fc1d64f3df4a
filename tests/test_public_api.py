"""What the docs teach is public: importable from ``pytest_sme2`` or a public submodule's ``__all__``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = ("pytest_sme2", "pytest_sme2.report")


def _taught_imports() -> list[tuple[str, str]]:
    """(module, name) of every ``from pytest_sme2... import ...`` and dotted ``pytest_sme2.X.Y`` in the docs."""
    found = []
    for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        text = path.read_text()
        for module, names in re.findall(r"^from (pytest_sme2[\w.]*) import ([\w, ]+)$", text, re.MULTILINE):
            found += [(module, name.strip()) for name in names.split(",")]
        for dotted in re.findall(r"\bpytest_sme2(?:\.\w+)+", text):
            module, _, name = dotted.rpartition(".")
            found.append((module, name))
    return found


def test_every_import_the_docs_teach_is_public() -> None:
    taught = _taught_imports()
    assert ("pytest_sme2.report", "build_record") in taught  # the reader finds the example of docs/profile.md
    names = [(module, name) for module, name in taught if f"{module}.{name}" not in PUBLIC_MODULES]
    private = sorted({f"{module}.{name}" for module, name in names
                      if module not in PUBLIC_MODULES or name not in importlib.import_module(module).__all__})
    assert not private, f"the docs teach names that are not public: {private}"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_imports(module: str) -> None:
    imported = importlib.import_module(module)
    for name in imported.__all__:
        assert getattr(imported, name) is not None, name


def test_the_version_is_pyprojects() -> None:
    """One version: pyproject.toml's, also what summary.json records as tool_version."""
    import tomllib

    from pytest_sme2 import __version__
    from pytest_sme2._version import __version__ as layered

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert __version__ == layered == project["version"]
