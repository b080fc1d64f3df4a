"""The verdict where CI owners look, under GitHub Actions (issue 28, item 3).

A job's summary page shows what a step appends to the file ``GITHUB_STEP_SUMMARY`` names, and a line
``::error file=F,line=N,title=T::MESSAGE`` on a step's output becomes an annotation on that line of the pull
request's diff (GitHub's workflow commands). So, with no user step: the session's summary.md is appended to the
job summary, and each regressed baseline file's failure (as the terminal gives it: root cause first, the update
command last) is printed as one annotation on its test's line; GitHub shows only 10 error annotations a step.
Nothing happens outside Actions (``GITHUB_ACTIONS`` is not ``true``) or without the variable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_sme2.system.regular_files import SESSION_FILE, read_text
from pytest_sme2.system.safe_files import append_lines

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def in_actions(environ: Mapping[str, str]) -> bool:
    return environ.get("GITHUB_ACTIONS") == "true"


def append_job_summary(markdown: Path, environ: Mapping[str, str]) -> Path | None:
    """Append the session's summary.md to the job summary; the file written, or None (not under Actions)."""
    target = environ.get(STEP_SUMMARY)
    if not in_actions(environ) or not target:
        return None
    append_lines(
        target, read_text(markdown, SESSION_FILE, errors="replace").splitlines(), sync=False
    )  # never through a link (safe_files)
    return Path(target)


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def regression_annotations(
    test_entries: Iterable[Mapping[str, Any]], locations: Mapping[str, tuple[str, int]], environ: Mapping[str, str]
) -> list[str]:
    """One ``::error`` line per regression row of each test (a baseline file's failure), on the test's file and
    line (``locations``: nodeid -> (path from the rootdir, 1-based line)); none outside Actions. Newlines are
    escaped as GitHub asks."""
    if not in_actions(environ):
        return []
    lines = []
    for entry in test_entries:
        location = locations.get(entry["nodeid"])
        where = f"file={_property(location[0])},line={int(location[1])}," if location else ""
        for verdict in entry.get("verdicts", []):
            if verdict.get("verdict") == "regression":
                title = _property(f"pytest-sme2 regression: {entry['nodeid']}")
                lines.append(f"::error {where}title={title}::{_data(str(verdict.get('message', '')))}")
    return lines
