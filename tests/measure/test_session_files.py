"""Artifact placement in test folders: links to the export cache's files (never copies of them), never a stale
file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_sme2.measure.session import link_artifact
from pytest_sme2.system.safe_files import copy_file


def test_a_cached_program_is_linked_into_the_test_folder_not_copied(tmp_path: Path) -> None:
    # A real model's program and ETRecord are hundreds of MB; each test of each session copied them (issue 63).
    first, second = tmp_path / "export-1.pte", tmp_path / "export-2.pte"
    first.write_bytes(b"old program")
    second.write_bytes(b"new program, other size")
    destination = tmp_path / "test-folder" / "model.pte"
    destination.parent.mkdir()
    assert link_artifact(first, destination).read_bytes() == b"old program"
    assert os.path.samefile(first, destination)
    assert link_artifact(second, destination).read_bytes() == b"new program, other size"  # the stale one replaced
    assert os.path.samefile(second, destination) and not destination.is_symlink()
    assert link_artifact(second, destination) == destination
    assert first.read_bytes() == b"old program"  # the earlier export is untouched
    assert not second.stat().st_mode & 0o222  # the entry's file is read-only: writing the artifact fails


def test_a_link_planted_at_the_artifact_is_replaced_never_followed(tmp_path: Path) -> None:
    source, outside = tmp_path / "entry.pte", tmp_path / "outside"
    source.write_bytes(b"program")
    outside.write_bytes(b"not ours")
    destination = tmp_path / "test" / "model.pte"
    destination.parent.mkdir()
    destination.symlink_to(outside)
    link_artifact(source, destination)
    assert os.path.samefile(source, destination) and not destination.is_symlink()
    assert outside.read_bytes() == b"not ours"


def test_an_artifact_on_another_file_system_is_a_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def no_hard_links(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_hard_links)
    source = tmp_path / "entry.pte"
    source.write_bytes(b"program")
    destination = tmp_path / "test" / "model.pte"
    destination.parent.mkdir()
    link_artifact(source, destination)
    assert destination.is_symlink() and destination.resolve() == source.resolve()
    assert destination.read_bytes() == b"program"


def test_a_stale_artifact_is_replaced_not_reused(tmp_path: Path) -> None:
    # An artifacts folder reused across sessions still holds the program of an earlier export
    # under the same name; the new program must replace it, or the run would time the old one.
    first, second = tmp_path / "export-1.pte", tmp_path / "export-2.pte"
    first.write_bytes(b"old program")
    second.write_bytes(b"new program, other size")
    destination = tmp_path / "test-folder" / "model.pte"
    destination.parent.mkdir()
    assert copy_file(first, destination).read_bytes() == b"old program"
    assert copy_file(second, destination).read_bytes() == b"new program, other size"
    assert not os.path.samefile(second, destination)  # a copy, never a hard link into the cache (issue 23)
    assert copy_file(second, destination) == destination
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
