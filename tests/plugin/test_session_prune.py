"""The bound on `.sme2/` holds without anyone running `pytest-sme2 cache prune` (issue 63): at the end of a
session its cache and artifacts folders are pruned to ini sme2_max_size and sme2_keep_sessions, keeping the
session's own folder and whatever it used, with one line saying what went; 0 turns each off, and a bound that is
not a size is a usage error before any test.

The export entries are the tiny model's, exported by the real code once for the module; the old session folders
are named by the plugin's own naming, of a process that has ended.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import export_tiny_both_ways
from pytest_sme2.export.cache_entry import META_NAME
from pytest_sme2.measure.session import session_folder_name

DAY = 86400.0
TEST = """
def test_writes_into_its_session_folder(sme2_session, request):
    (sme2_session.test_dir(request.node.nodeid) / "note.txt").write_text("mine")
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("session-prune")
    return export_tiny_both_ways(root) / "cache"


def _project(pytester: pytest.Pytester, exported: Path, *ini: str) -> tuple[Path, Path, Path, list[Path]]:
    """A project whose cache holds an entry last used 30 days ago and one used after the session starts (a
    concurrent hit), and whose artifacts folder holds three old session folders of an ended process."""
    cache, artifacts = pytester.path / "c", pytester.path / "a"
    shutil.copytree(exported, cache)
    [old] = cache.glob("tiny-fp32-xnnpack-*")
    [recent] = cache.glob("tiny-fp32-none-*")
    for entry, when in ((old, time.time() - 30 * DAY), (recent, time.time() + 3600)):
        os.utime(entry / META_NAME, (when, when))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    sessions = []
    for days in (40, 30, 20):
        folder = artifacts / session_folder_name(time.time() - days * DAY, child.pid)
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text("{}")
        sessions.append(folder)
    pytester.makeini("\n".join(["[pytest]", f"sme2_cache_dir = {cache}", f"sme2_artifacts_dir = {artifacts}", *ini]))
    pytester.makepyfile(test_it=TEST)
    return artifacts, old, recent, sessions


def test_a_session_prunes_to_the_bound_at_its_end_and_keeps_its_own_folder_and_what_it_used(
    pytester: pytest.Pytester, exported: Path
) -> None:
    artifacts, old, recent, sessions = _project(pytester, exported, "sme2_keep_sessions = 2", "sme2_max_size = 1")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    [own] = sorted(artifacts.iterdir())
    assert own not in sessions and list(own.rglob("note.txt")), "the session's own folder stays"
    assert not any(s.exists() for s in sessions) and not old.exists()
    assert recent.is_dir(), "an entry used since the session started stays"
    [line] = [line for line in result.outlines if line.startswith("sme2: removed")]
    assert "3 session folders" in line and "1 export entry" in line and "still above sme2_max_size" in line, line


def test_zero_turns_the_bound_off_and_a_bound_that_is_not_a_size_stops_the_session_first(
    pytester: pytest.Pytester, exported: Path
) -> None:
    artifacts, old, recent, sessions = _project(pytester, exported, "sme2_keep_sessions = 0", "sme2_max_size = 0")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert all(s.is_dir() for s in sessions) and old.is_dir()
    assert not [line for line in result.outlines if line.startswith("sme2: removed")]
    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "sme2_max_size=ten gigabytes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sme2_max_size = ten gigabytes* is not a size*e.g. 5GB*"])
    assert all(s.is_dir() for s in sessions) and old.is_dir()
