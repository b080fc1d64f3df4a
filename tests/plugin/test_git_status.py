"""After a session in a git repository, ``git status`` shows nothing pytest-sme2 wrote: `.sme2/` ignores itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.system.git_ignored import GITIGNORE

# A session that writes into its artifacts folder without exporting a model (cheap, and enough: the folder
# that matters is the one the session creates, not what it holds).
WRITES_ARTIFACTS = """
def test_writes(sme2_session, request):
    (sme2_session.test_dir(request.node.nodeid) / "note.txt").write_text("output")
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(pytester: pytest.Pytester) -> pytest.Pytester:
    if shutil.which("git") is None:
        pytest.skip("needs git: apt-get install git")
    _git(pytester.path, "init", "-q")
    pytester.makepyfile(test_output=WRITES_ARTIFACTS)
    return pytester


def test_a_sessions_output_is_not_shown_by_git_status(repo: pytest.Pytester) -> None:
    repo.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert list((repo.path / ".sme2" / "artifacts").glob("session-*/*/note.txt"))
    assert (repo.path / ".sme2" / GITIGNORE).read_text().splitlines()[-1] == "*"
    assert _git(repo.path, "status", "--porcelain", "--untracked-files=all").splitlines() == ["?? test_output.py"]


def test_a_folder_that_was_there_before_the_session_is_the_users(repo: pytest.Pytester) -> None:
    (repo.path / ".sme2").mkdir()
    repo.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not (repo.path / ".sme2" / GITIGNORE).exists()
    assert (repo.path / ".sme2" / "artifacts" / GITIGNORE).exists()  # the session created this one


def test_artifacts_under_a_new_baselines_folder_leave_the_baselines_visible_to_git(repo: pytest.Pytester) -> None:
    """Issue 64 (weak): `--sme2-artifacts-dir=baselines/artifacts` in a new project wrote a `*` .gitignore into
    baselines/: git ignored every baseline recorded later, and `git status` said nothing."""
    repo.runpytest_inprocess("-p", "no:cacheprovider", "--sme2-artifacts-dir=baselines/artifacts").assert_outcomes(
        passed=1
    )
    assert not (repo.path / "baselines" / GITIGNORE).exists()
    assert (repo.path / "baselines" / "artifacts" / GITIGNORE).exists()
    (repo.path / "baselines" / "fp").mkdir()
    (repo.path / "baselines" / "fp" / "test.json").write_text("{}")  # a baseline recorded later
    assert "?? baselines/fp/test.json" in _git(repo.path, "status", "--porcelain", "--untracked-files=all")
