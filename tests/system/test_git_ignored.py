"""The folders pytest-sme2 creates for its output carry a .gitignore of ``*``; folders it did not create are left
alone."""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.system.git_ignored import GITIGNORE, IGNORE_EVERYTHING, first_created, keep_out_of_git, output_folder


def test_the_topmost_folder_created_is_the_one_found(tmp_path: Path) -> None:
    assert first_created(tmp_path / ".sme2" / "cache") == tmp_path / ".sme2"
    (tmp_path / ".sme2").mkdir()
    assert first_created(tmp_path / ".sme2" / "cache") == tmp_path / ".sme2" / "cache"
    assert first_created(tmp_path / ".sme2") is None


def test_an_output_folder_ignores_everything_from_its_topmost_new_folder(tmp_path: Path) -> None:
    out = output_folder(tmp_path / ".sme2" / "bisect-1")
    assert out.is_dir()
    assert (tmp_path / ".sme2" / GITIGNORE).read_text() == IGNORE_EVERYTHING
    assert IGNORE_EVERYTHING.splitlines()[-1] == "*"
    assert not (out / GITIGNORE).exists()  # one is enough: git ignores what is under it


def test_a_users_own_folder_and_gitignore_are_left_alone(tmp_path: Path) -> None:
    mine = tmp_path / "perf-output"
    mine.mkdir()
    output_folder(mine / "bisect-1")
    assert not (mine / GITIGNORE).exists()
    assert (mine / "bisect-1" / GITIGNORE).exists()  # created by pytest-sme2
    (mine / GITIGNORE).write_text("*.json\n")
    keep_out_of_git(mine)
    assert (mine / GITIGNORE).read_text() == "*.json\n"


def test_a_linked_folder_is_not_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / ".sme2").symlink_to(elsewhere)
    keep_out_of_git(tmp_path / ".sme2")
    assert list(elsewhere.iterdir()) == []
    keep_out_of_git(tmp_path / "never-created")  # a folder no session wrote: nothing to do
    assert not (tmp_path / "never-created").exists()


def test_a_new_folder_that_will_hold_the_baselines_is_never_ignored(tmp_path: Path) -> None:
    """Issue 64 (weak): `--sme2-artifacts-dir=baselines/artifacts` in a new project wrote a `*` .gitignore into
    baselines/, so git ignored every baseline and `git status` said nothing. The next folder down gets it."""
    baselines = tmp_path / "baselines"
    assert first_created(baselines / "artifacts", [baselines]) == baselines / "artifacts"
    assert first_created(tmp_path / "out" / "artifacts", [baselines]) == tmp_path / "out"
    assert first_created(tmp_path / "baselines", [baselines / "fp"]) is None  # it would hold them: never
