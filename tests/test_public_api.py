"""What the docs teach is public: importable from ``pytest_sme2`` or a public submodule's ``__all__``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = ("pytest_sme2", "pytest_sme2.report")


def _taught_imports() -> list[tuple[str, str]]:
    """(module, name) of every ``from pytest_sme2... import ...`` and dotted ``pytest_sme2.X.Y`` in the docs.

    CHANGELOG.md is history, not teaching, and is not read: it names the deprecated old names on purpose
    (test_renamed_public_names_still_work_for_one_release_and_warn checks those)."""
    # Entry point groups (pyproject.toml's, such as the targets', and the checks') are dotted names, not imports.
    from pytest_sme2.gate.checks.registered import GROUP as CHECKS_GROUP  # no shipped check registers there
    from pytest_sme2.system.toml_reader import tomllib

    groups = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]) | {CHECKS_GROUP}
    found = []
    for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        text = path.read_text()
        for module, names in re.findall(r"^from (pytest_sme2[\w.]*) import ([\w, ]+)$", text, re.MULTILINE):
            found += [(module, name.strip()) for name in names.split(",")]
        for dotted in re.findall(r"\bpytest_sme2(?:\.\w+)+", text):
            if dotted in groups:
                continue
            module, _, name = dotted.rpartition(".")
            found.append((module, name))
    return found


def test_every_import_the_docs_teach_is_public() -> None:
    taught = _taught_imports()
    assert ("pytest_sme2.report", "build_test_entry") in taught  # the reader finds the example of docs/profile.md
    names = [(module, name) for module, name in taught if f"{module}.{name}" not in PUBLIC_MODULES]
    private = sorted(
        {
            f"{module}.{name}"
            for module, name in names
            if module not in PUBLIC_MODULES or name not in importlib.import_module(module).__all__
        }
    )
    assert not private, f"the docs teach names that are not public: {private}"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_imports(module: str) -> None:
    imported = importlib.import_module(module)
    for name in imported.__all__:
        assert getattr(imported, name) is not None, name


def test_the_version_is_pyprojects() -> None:
    """One version: pyproject.toml's, also what summary.json records as tool_version."""
    from pytest_sme2 import __version__
    from pytest_sme2._version import __version__ as layered
    from pytest_sme2.system.toml_reader import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert __version__ == layered == project["version"]


def test_the_old_names_of_the_unreleased_api_are_gone() -> None:
    """Renamed before any release, so no alias keeps the old names (a second name of one thing only misleads)."""
    import importlib

    import pytest_sme2
    from pytest_sme2 import Profile
    from pytest_sme2.profile import stats

    for module, name in ((pytest_sme2, "Summary"), (stats, "Summary"), (pytest_sme2.report, "build_record")):
        with pytest.raises(AttributeError):
            getattr(module, name)
    assert not hasattr(Profile, "summary") and not hasattr(Profile, "work_summary")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("pytest_sme2.report.record")


DEPRECATED = re.compile(
    r"\.summary\(\)|\.work_summary\(|\bbuild_record\b|pytest_sme2\.Summary\b|stats\.Summary\b"
    r"|\bimport Summary\b|report\.record\b"
)


def test_no_example_or_suite_of_ours_uses_a_deprecated_name() -> None:
    """The deprecated aliases are for users' code: the perf suite, models, benchmarks and the docs teach the
    new names (a perf test still called work_summary() and warned in every run)."""
    places = [
        *(REPO / "perf_tests").rglob("*.py"),
        *(REPO / "models").rglob("*.py"),
        *(REPO / "benchmarks").glob("*.py"),
        *(REPO / "docs").glob("*.md"),
        REPO / "conftest.py",
    ]
    texts = {str(path.relative_to(REPO)): path.read_text() for path in places if path.is_file()}
    texts["README.md"] = (REPO / "README.md").read_text()
    # a line that names a deprecated alias as deprecated (the design map's row for the old module) is no use of it
    found = [
        f"{name}: {line.strip()[:80]}"
        for name, text in texts.items()
        for line in text.splitlines()
        if DEPRECATED.search(line) and "deprecated" not in line.lower()
    ]
    assert not found, found
