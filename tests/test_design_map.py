"""docs/design.md is the map of the package: every module has its line, and the docs point only inside the
repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _mapped_by_targets_page() -> set[str]:
    """The modules of registered targets that have their section in docs/targets.md (``## `NAME```): that page,
    which the target's own docs go into, is their map, so a new target touches no second page."""
    from pytest_sme2.run.targets.registry import target_classes

    page = (REPO / "docs" / "targets.md").read_text()
    targets = REPO / "pytest_sme2" / "run" / "targets"
    mapped = set()
    for name, target in target_classes().items():
        parts = target.__module__.split(".")
        if parts[:3] != ["pytest_sme2", "run", "targets"] or f"## `{name}`" not in page:
            continue
        home = targets / parts[3]  # run/targets/NAME.py, or the package run/targets/NAME/
        files = home.rglob("*.py") if home.is_dir() else [home.with_suffix(".py")]
        mapped |= {path.relative_to(REPO / "pytest_sme2").as_posix() for path in files}
    return mapped


def test_every_module_has_its_line_in_the_design_map() -> None:
    design = (REPO / "docs" / "design.md").read_text()
    listed = set(re.findall(r"`([\w/]+\.py)`", design)) | _mapped_by_targets_page()
    modules = {path.relative_to(REPO / "pytest_sme2").as_posix() for path in (REPO / "pytest_sme2").rglob("*.py")}
    # each by its path in the package: `export.py`, `targets/adb.py`
    missing = sorted(modules - listed)
    assert not missing, f"docs/design.md has no line for: {missing}"


def test_no_doc_or_docstring_points_outside_the_repository() -> None:
    """A clone has no ../shared: FACTS.md and DESIGN.md are the authors' notes, not the project's docs."""
    texts = [*(REPO / "pytest_sme2").rglob("*.py"), *(REPO / "docs").glob("*.md"), REPO / "README.md"]
    pointing = [
        str(path.relative_to(REPO))
        for path in texts
        if re.search(r"FACTS\.md|DESIGN\.md|\.\./shared|shared/DESIGN", path.read_text(errors="replace"))
    ]
    assert not pointing, f"these point outside the repository: {pointing}"


def test_the_tests_mirror_the_package() -> None:
    """A stage's tests sit in the folder of the same name (tests/gate/ for pytest_sme2/gate/); the whole
    package's checks (imports, public names, docs, end-to-end models) stay at the top of tests/."""
    package = {path.name for path in (REPO / "pytest_sme2").iterdir() if (path / "__init__.py").exists()}
    folders = {path.name for path in (REPO / "tests").iterdir() if path.is_dir() and any(path.glob("test_*.py"))}
    assert folders, "tests/ has no stage folders"
    assert not folders - package, f"tests/ folders that name no folder of pytest_sme2/: {sorted(folders - package)}"


def test_no_package_module_or_function_is_named_like_a_test() -> None:
    """pytest collects ``test_*.py`` files and ``test_*`` functions: a package module or a public function
    with such a name becomes a bogus test in a user's tree or in any test module that imports it (a
    ``test_entry_text`` imported into a test file once ran as a test)."""
    package = REPO / "pytest_sme2"
    modules = sorted(str(p.relative_to(REPO)) for p in package.rglob("*.py") if p.name.startswith("test"))
    functions = sorted(
        f"{p.relative_to(REPO)}: {name}"
        for p in package.rglob("*.py")
        for name in re.findall(r"^def (test\w*)\(", p.read_text(), re.MULTILINE)
    )
    assert not modules and not functions, modules + functions
