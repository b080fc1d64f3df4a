"""Reports people read, one job per module (docs/design.md lists them).

Public here, for reports of profiles made outside pytest (docs/profile.md, "A Profile without pytest"):
``build_test_entry`` (Profiles of one test -> its test entry), ``session_summary`` (test entries -> summary.json's
document) and ``write_session`` (that document -> summary.json, summary.md and report.html). Everything
else in this folder is private; they are loaded on first use, so importing a report module stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_test_entry", "session_summary", "write_session"]


def __getattr__(name: str) -> Any:
    if name == "build_test_entry":
        from pytest_sme2.report.entries import build_test_entry

        return build_test_entry
    if name in ("session_summary", "write_session"):
        from pytest_sme2.report import summary

        return getattr(summary, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
