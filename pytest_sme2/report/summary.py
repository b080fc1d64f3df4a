"""The session summary (summary.json) and writing a session's report files from it.

summary.json is the source every session output is rendered from, so
``pytest-sme2 report DIR`` rebuilds summary.md and report.html without
re-running anything. Its schema is documented in docs/artifacts.md; bump
SCHEMA_VERSION on any incompatible change.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_sme2.errors import UsageError
from pytest_sme2.gate.gate import GATE_INPUT, gate_input_problem
from pytest_sme2.report.html import session_html
from pytest_sme2.report.markdown import session_markdown
from pytest_sme2.system.regular_files import SUMMARY, read_bytes
from pytest_sme2.system.safe_files import write_file

# 2: an emulated profile's latency, e2e_ms, load_ms and init_ms are null and its operator rows have no time
# columns (emulated time is not time). Version 1 files still read: every reader guards those keys.
# 3: a profile's ``process_sizes`` is ``replica_sizes`` (issue 67); each test's gate input says its records' format
# (``record_version``, gate/record.py), and one without it is read as format 1.
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
REPORT_HTML = "report.html"


def session_summary(test_entries: Sequence[Mapping[str, Any]], session_dir: Path | None) -> dict[str, Any]:
    """The summary document: schema version, when, where, the target, and one test entry per perf test."""
    from pytest_sme2._version import __version__

    target = next(
        (
            p["metadata"].get("target")
            for r in test_entries
            for p in r["profiles"]
            if p.get("metadata", {}).get("target")
        ),
        None,
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "pytest-sme2",
        "tool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "session_dir": str(session_dir) if session_dir else None,
        "target": target,
        "tests": sorted((dict(r) for r in test_entries), key=lambda r: r["nodeid"]),
    }


def render(summary: Mapping[str, Any], out_dir: Path, html: bool = True) -> dict[str, Path]:
    """Write summary.md (and report.html unless ``html`` is false) into ``out_dir`` from a summary document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / SUMMARY_MD}
    write_file(paths["markdown"], session_markdown(summary))
    if html:
        paths["html"] = out_dir / REPORT_HTML
        write_file(paths["html"], session_html(summary))
    return paths


def write_session(summary: Mapping[str, Any], out_dir: Path, html: bool = True) -> dict[str, Path]:
    """summary.json, summary.md and (with ``html``) report.html of a session.

    report.html draws charts for every test, about a second each; without it
    `pytest-sme2 report SESSION_DIR` draws it later from summary.json.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SUMMARY_JSON
    write_file(path, json.dumps(summary, indent=1, default=str))
    return {"json": path, **render(summary, out_dir, html=html)}


def load_summary(directory: Path) -> dict[str, Any]:
    """Read and check a session's summary.json; errors say which file and what is wrong."""
    path = directory / SUMMARY_JSON if directory.is_dir() else directory
    if not directory.exists():
        raise UsageError(
            f"{directory} does not exist; pass a session folder such as .sme2/artifacts/session-<time>-<pid>"
        )
    if not path.exists() or path.is_dir():
        raise UsageError(
            f"{directory} has no {SUMMARY_JSON}; it is not a pytest-sme2 session folder, or that "
            "session ended before writing its summary"
        )
    try:
        summary = json.loads(read_bytes(path, SUMMARY))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is not readable JSON ({exc}); re-run the session to write it again") from None
    except RecursionError:  # "[[[[...": a damaged or hostile file, not a bug
        raise UsageError(
            f"{path} is nested too deeply to be a pytest-sme2 summary; the file is damaged, "
            "re-run the session to write it again"
        ) from None
    version = summary.get("schema_version") if isinstance(summary, dict) else None
    if version not in READABLE_VERSIONS:
        raise UsageError(
            f"{path} has schema_version {version!r}; this pytest-sme2 reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    if not isinstance(summary.get("tests"), list):
        raise UsageError(f"{path} has no 'tests' list; the file is damaged")
    for i, test in enumerate(summary["tests"]):
        wrong = _shape_problem(test, i)
        if wrong:
            raise UsageError(f"{path} is damaged: {wrong}; re-run the session to write it again")
    return summary


# What every test entry and profile digest in a summary.json has (the report reads them unconditionally);
# an emulated profile's latency is null (emulated time is not time).
_TEST_KEYS = {"nodeid": str, "profiles": list}
_PROFILE_KEYS = {"model": str, "recipe": str, "variant": str, "latency": dict, "shares": dict}


def _shape_problem(test: Any, i: int) -> str | None:
    if not isinstance(test, dict):
        return f"tests[{i}] is not an object"
    for key, kind in _TEST_KEYS.items():
        if not isinstance(test.get(key), kind):
            return f"tests[{i}] has no {key!r} {kind.__name__}"
    for j, profile in enumerate(test["profiles"]):
        where = f"tests[{i}].profiles[{j}]"
        if not isinstance(profile, dict):
            return f"{where} is not an object"
        for key, kind in _PROFILE_KEYS.items():
            if not isinstance(profile.get(key), kind) and not (key == "latency" and profile.get("emulated") is True):
                return f"{where} has no {key!r} {'object' if kind is dict else kind.__name__}"
    return gate_input_problem(test[GATE_INPUT], f"tests[{i}].{GATE_INPUT}") if GATE_INPUT in test else None
