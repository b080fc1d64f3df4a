"""Deprecated, kept for one release: the old name of ``report/entries.py`` (CHANGELOG.md).

"record" now means a baseline record only; a test's entry in the reports is built by
``pytest_sme2.report.build_test_entry``.
"""

from __future__ import annotations

import warnings

from pytest_sme2.report.entries import build_test_entry, profile_entry

warnings.warn(
    "pytest_sme2.report.record is deprecated; use pytest_sme2.report.build_test_entry (its build_record, " "renamed)",
    DeprecationWarning,
    stacklevel=2,
)

build_record = build_test_entry

__all__ = ["build_record", "profile_entry"]
