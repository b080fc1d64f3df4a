"""Artifact placement in test folders: links where possible, never a stale file."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_sme2.session import link_or_copy


def test_a_stale_artifact_is_replaced_not_reused(tmp_path: Path) -> None:
    # An artifacts folder reused across sessions still holds the program of an earlier export
    # under the same name; the new program must replace it, or the run would time the old one.
    first, second = tmp_path / "export-1.pte", tmp_path / "export-2.pte"
    first.write_bytes(b"old program")
    second.write_bytes(b"new program, other size")
    destination = tmp_path / "test-folder" / "model.pte"
    destination.parent.mkdir()
    assert link_or_copy(first, destination).read_bytes() == b"old program"
    assert link_or_copy(second, destination).read_bytes() == b"new program, other size"
    assert os.path.samefile(second, destination)  # a hard link, not a copy
    assert link_or_copy(second, destination) == destination  # the same file is kept as is
    assert first.read_bytes() == b"old program"  # the earlier export is untouched


def test_run_folders_of_one_test_are_numbered_in_call_order_across_its_runners(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile("""
        import pytest

        @pytest.mark.model("tiny")
        def test_pair(exported_pte, runner, etdump_profile):
            etdump_profile(exported_pte, runner(threads=1))
            etdump_profile(exported_pte, runner(threads=2))
        """)
    sme2_project.runpytest_inprocess("--sme2-artifacts-dir=artifacts", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    folders = sorted(p.name.split("-", 1)[0] for p in (sme2_project.path / "artifacts").glob("session-*/*/[0-9]*-profile-*"))
    assert folders == ["01", "02"]  # each runner used to count from 01, so a pair shared one number
