"""Artifact placement in test folders: copies, never a stale file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_sme2.measure.session import copy_artifact


def test_a_stale_artifact_is_replaced_not_reused(tmp_path: Path) -> None:
    # An artifacts folder reused across sessions still holds the program of an earlier export
    # under the same name; the new program must replace it, or the run would time the old one.
    first, second = tmp_path / "export-1.pte", tmp_path / "export-2.pte"
    first.write_bytes(b"old program")
    second.write_bytes(b"new program, other size")
    destination = tmp_path / "test-folder" / "model.pte"
    destination.parent.mkdir()
    assert copy_artifact(first, destination).read_bytes() == b"old program"
    assert copy_artifact(second, destination).read_bytes() == b"new program, other size"
    assert not os.path.samefile(second, destination)  # a copy, never a hard link into the cache (issue 23)
    assert copy_artifact(second, destination) == destination
    assert first.read_bytes() == b"old program"  # the earlier export is untouched


def test_run_folders_of_one_test_are_numbered_in_call_order_across_its_runners(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile("""
        import pytest

        @pytest.mark.model("tiny")
        def test_pair(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner(threads=1))
            etdump_profile(exported_pte, runner(threads=2))
        """)
    sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "-p", "no:cacheprovider").assert_outcomes(
        passed=1
    )
    folders = sorted(
        p.name.split("-", 1)[0] for p in (sme2_project.path / "artifacts").glob("session-*/*/[0-9]*-profile-*")
    )
    assert folders == ["01", "02"]  # each runner used to count from 01, so a pair shared one number
