"""docs/design.md says what a Windows (non-POSIX) target would take (issue 67): every module of the package that
calls a POSIX-only API is named in that section, so the statement cannot go stale as code moves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_sme2"
SECTION_HEADING = "## A target on Windows (not POSIX): what it would take"

# Calls and names Windows' Python does not have (or that mean nothing there), as they are spelled in code.
POSIX_ONLY = re.compile(
    r"\bimport fcntl\b|\bfcntl\.|os\.O_NOFOLLOW|os\.getuid|os\.geteuid|os\.killpg|os\.fork\b|os\.mkfifo"
    r"|os\.sched_getaffinity|os\.fchmod|start_new_session|signal\.SIG(HUP|KILL|CHLD)\b|PR_SET_PDEATHSIG"
    r"|resource\.(setrlimit|getrlimit)|LD_PRELOAD|DYLD_INSERT_LIBRARIES"
)


def _section() -> str:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert SECTION_HEADING in text, f"docs/design.md lost its section {SECTION_HEADING!r}"
    body = text.split(SECTION_HEADING, 1)[1]
    return body.split("\n## ", 1)[0]


def posix_only_modules(package: Path = PACKAGE) -> dict[str, str]:
    """Each module (path relative to the package) that uses a POSIX-only API -> the first such use."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("#", 1)[0]
            match = POSIX_ONLY.search(code)
            if match:
                found[path.relative_to(package).as_posix()] = match.group(0)
                break
    return found


def test_every_module_using_a_posix_only_api_is_named_in_the_windows_section() -> None:
    section = _section()
    missing = {module: use for module, use in posix_only_modules().items() if f"`{module}`" not in section}
    assert not missing, (
        "these modules use POSIX-only APIs but docs/design.md's section "
        f"{SECTION_HEADING!r} does not name them; say there what Windows would need instead: {missing}"
    )


def test_the_scan_finds_the_lock_module_that_stops_windows_imports() -> None:
    # The scan must be able to fail: the module that imports fcntl at module level is one it has to find.
    assert posix_only_modules().get("system/locks.py") in {"import fcntl", "fcntl."}


def test_a_new_module_with_a_posix_call_is_caught(tmp_path: Path) -> None:
    (tmp_path / "system").mkdir()
    (tmp_path / "system" / "new_pipe.py").write_text("import os\nos.mkfifo('x')\n", encoding="utf-8")
    (tmp_path / "fine.py").write_text("# os.mkfifo in a comment is not a call\nx = 1\n", encoding="utf-8")
    assert posix_only_modules(tmp_path) == {"system/new_pipe.py": "os.mkfifo"}
