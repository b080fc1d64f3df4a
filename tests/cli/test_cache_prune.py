"""`pytest-sme2 cache prune` (issue 63): the least recently used entries and the oldest session folders go until
`.sme2/` is within its bound, and nothing that must stay ever goes.

The export entries are the tiny model's, exported by the real code once per module (XNNPACK and portable) and
copied into each test's folder; the result entries are stored by the real ResultCache; the session folders are
named by the plugin's own naming and hold a hard link to an entry's program, as a real session's do. Sizes are
measured here by this file's own walk (each file once), never taken from the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY_MODEL, export_tiny_both_ways
from pytest_sme2 import Recipe
from pytest_sme2.cli import main
from pytest_sme2.export.cache_entry import META_NAME, PTE_NAME
from pytest_sme2.export.export import export
from pytest_sme2.measure.session import session_folder_name
from pytest_sme2.model.registry import ModelRegistry
from pytest_sme2.run.result_cache import MANIFEST, ResultCache, RunKey
from pytest_sme2.system.locks import entry_lock

DAY = 86400.0


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the tiny model's two entries (XNNPACK and portable), made by the real export."""
    root = tmp_path_factory.mktemp("prune")
    return export_tiny_both_ways(root) / "cache"


def _dead_pid() -> int:
    """The pid of a process that has ended (a session folder of it is not a running session's)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class Sme2Dir:
    """A project's .sme2 with two export entries, a result entry and two session folders, each last used at a
    time this test sets (``ages``: days ago)."""

    def __init__(self, exported: Path, root: Path) -> None:
        self.root = root
        self.cache = root / ".sme2" / "cache"
        self.artifacts = root / ".sme2" / "artifacts"
        shutil.copytree(exported, self.cache)
        [self.xnnpack] = self.cache.glob("tiny-fp32-xnnpack-*")
        [self.portable] = self.cache.glob("tiny-fp32-none-*")
        made = root / "run"  # the files a counted run left, stored by the real result cache
        made.mkdir()
        (made / "counts.json").write_text(json.dumps({"instructions": list(range(5000))}))
        self.key = RunKey("ab" * 32, {"program": "cd" * 32})
        results = ResultCache(self.cache / "results")
        results.store(self.key, made, ["counts.json"], {"runs": 1})
        self.result = results.entry(self.key)
        self.artifacts.mkdir(parents=True)
        pid = _dead_pid()
        self.sessions = []
        for days in (30, 20):
            folder = self.artifacts / session_folder_name(time.time() - days * DAY, pid)
            (folder / "tests").mkdir(parents=True)
            (folder / "summary.json").write_text("{}" * 2000)
            os.link(self.xnnpack / PTE_NAME, folder / "tests" / "tiny.pte")  # as link_artifact makes it
            self.sessions.append(folder)

    def used(self, entry: Path, days_ago: float) -> None:
        record = entry / (MANIFEST if entry.parent.name == "results" else META_NAME)
        when = time.time() - days_ago * DAY
        os.utime(record, (when, when))

    def everything(self) -> set[Path]:
        return {Path(root) / name for root, dirs, files in os.walk(self.root / ".sme2") for name in dirs + files}


def measured(*folders: Path) -> int:
    """This test's own measure of what the folders hold: every regular file and link once, by inode."""
    seen: dict[tuple[int, int], int] = {}
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                info = os.lstat(os.path.join(root, name))
                seen[(info.st_dev, info.st_ino)] = info.st_size
    return sum(seen.values())


def entry_bytes(path: Path) -> int:
    return measured(path)


@pytest.fixture
def sme2_dir(exported: Path, tmp_path: Path) -> Sme2Dir:
    made = Sme2Dir(exported, tmp_path)
    # least recently used first: the XNNPACK entry (its program is also in both sessions), the oldest session,
    # the result entry, the newer session, the portable entry
    made.used(made.xnnpack, 40)
    made.used(made.result, 25)
    made.used(made.portable, 10)
    return made


def _prune(capsys: pytest.CaptureFixture[str], where: Path, *args: str) -> tuple[int, str, str]:
    code = main(["cache", "prune", "--project", str(where), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _removed(out: str) -> list[str]:
    return [line.split()[-1] for line in out.splitlines() if line.lstrip().startswith(("removed ", "would remove "))]


def test_the_least_recently_used_go_first_until_the_total_is_within_the_bound(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    before = measured(d.cache, d.artifacts)
    # a bound that only the newest item (the portable entry) and the locks fit under
    bound = entry_bytes(d.portable) + 10
    code, out, err = _prune(capsys, d.root, "--max-size", str(bound), "--keep-sessions", "0")
    assert code == 0, err
    order = [str(p) for p in (d.xnnpack, d.sessions[0], d.result, d.sessions[1])]
    assert [os.path.abspath(p) for p in _removed(out)] == order, out
    assert d.portable.is_dir() and not any(Path(p).exists() for p in order)
    after = measured(d.cache, d.artifacts)
    assert after <= bound < before
    assert "before" in out.splitlines()[-1] and "hold" in out.splitlines()[-1]


def test_a_bound_the_folders_fit_removes_nothing_and_one_byte_less_removes_only_the_oldest(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    total = measured(d.cache, d.artifacts)
    code, out, _ = _prune(capsys, d.root, "--max-size", str(total), "--keep-sessions", "0")
    assert code == 0 and _removed(out) == [], out
    # the XNNPACK entry's program is hard-linked into both sessions: removing the entry frees less than it
    # holds, and still more than one byte
    code, out, _ = _prune(capsys, d.root, "--max-size", str(total - 1), "--keep-sessions", "0")
    assert [os.path.abspath(p) for p in _removed(out)] == [str(d.xnnpack)], out
    assert measured(d.cache, d.artifacts) <= total - 1


def test_keep_sessions_and_older_than_remove_whatever_the_size(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    code, out, _ = _prune(capsys, d.root, "--max-size", "0", "--keep-sessions", "1")
    assert code == 0 and [os.path.abspath(p) for p in _removed(out)] == [str(d.sessions[0])], out
    code, out, _ = _prune(capsys, d.root, "--max-size", "0", "--keep-sessions", "0", "--older-than", "22")
    assert sorted(os.path.abspath(p) for p in _removed(out)) == sorted(map(str, (d.xnnpack, d.result))), out
    assert d.portable.is_dir() and d.sessions[1].is_dir()


def test_a_dry_run_lists_what_would_go_and_changes_nothing(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    files = d.everything()
    times = {p: os.lstat(p).st_mtime_ns for p in files}
    code, out, _ = _prune(capsys, d.root, "--max-size", "1", "--dry-run")
    assert code == 0 and len(_removed(out)) == 5, out
    assert "would hold" in out.splitlines()[-1]
    assert d.everything() == files and {p: os.lstat(p).st_mtime_ns for p in files} == times  # not even a lock file


def test_an_entry_whose_lock_another_holder_has_is_kept_and_said_so(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    # an flock is per open file: held through one descriptor here, the prune's own open of it cannot take it
    with entry_lock(d.cache, d.xnnpack.name), ResultCache(d.cache / "results").computing(d.key):
        code, out, _ = _prune(capsys, d.root, "--max-size", "1", "--keep-sessions", "0")
    assert code == 0
    assert d.xnnpack.is_dir() and d.result.is_dir()
    for entry in (d.xnnpack, d.result):
        assert f"{entry}: another process holds its lock" in out, out
    assert not d.portable.exists() and not any(s.exists() for s in d.sessions)
    assert "still above the bound" in out.splitlines()[-1]


def test_links_are_removed_as_links_never_followed(
    sme2_dir: Sme2Dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    precious = tmp_path / "precious"
    (precious / "inside").mkdir(parents=True)
    (precious / "inside" / "data.bin").write_bytes(b"x" * 100_000)
    (precious / "file.bin").write_bytes(b"y" * 100_000)
    planted = d.cache / f"evil-fp32-xnnpack-{'0' * 24}"  # named like an entry, a link to a folder elsewhere
    planted.symlink_to(precious)
    os.symlink(precious / "file.bin", d.portable / "extra.bin")  # a link inside an entry, to a file elsewhere
    os.symlink(precious, d.sessions[0] / "out")  # and inside a session, to a folder elsewhere
    code, out, _ = _prune(capsys, d.root, "--max-size", "1", "--keep-sessions", "0")
    assert code == 0, out
    assert not os.path.lexists(planted) and not d.portable.exists() and not d.sessions[0].exists()
    assert (precious / "inside" / "data.bin").read_bytes() == b"x" * 100_000
    assert (precious / "file.bin").read_bytes() == b"y" * 100_000


def test_the_current_session_running_sessions_and_what_they_used_stay(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_sme2.measure import prune

    d = sme2_dir
    running = d.artifacts / session_folder_name(time.time() - 5 * DAY)  # this process's pid: still running
    running.mkdir()
    d.used(d.portable, 1)  # used since that session started
    folders = prune.Folders(d.cache, d.artifacts, d.root / "baselines")
    outcome = prune.prune(folders, prune.Bound(max_bytes=1, keep_sessions=1), current=d.sessions[1])
    kept = {item.path: why for item, why in outcome.skipped}
    assert d.sessions[1].is_dir() and "this session's folder" in kept[d.sessions[1]]
    assert running.is_dir() and f"pid {os.getpid()}" in kept[running]
    assert d.portable.is_dir() and "by a session still running" in kept[d.portable]
    assert not d.xnnpack.exists() and not d.result.exists() and not d.sessions[0].exists()


def test_a_hit_of_either_cache_makes_its_entry_the_most_recently_used(exported: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(exported, cache)
    [entry] = cache.glob("tiny-fp32-xnnpack-*")
    old = time.time() - 30 * DAY
    os.utime(entry / META_NAME, (old, old))
    (tmp_path / "tiny.py").write_text(TINY_MODEL)
    registry = ModelRegistry()
    registry.register("tiny", str(tmp_path / "tiny.py"))
    hit = export(registry.get("tiny"), Recipe(), cache)
    assert hit.from_cache and hit.directory == entry
    assert os.stat(entry / META_NAME).st_mtime > time.time() - 600

    made = tmp_path / "run"
    made.mkdir()
    (made / "out.bin").write_bytes(b"1")
    results = ResultCache(cache / "results")
    key = RunKey("ef" * 32, {"program": "01" * 32})
    results.store(key, made, ["out.bin"], {"runs": 1})
    os.utime(results.entry(key) / MANIFEST, (old, old))
    assert results.load(key, tmp_path / "answer") == {"runs": 1}
    assert os.stat(results.entry(key) / MANIFEST).st_mtime > time.time() - 600


def test_a_folder_that_is_not_pytest_sme2s_is_refused_whole(
    sme2_dir: Sme2Dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    (d.cache / "thesis.tex").write_text("years of work")
    files = d.everything()
    code, _, err = _prune(capsys, d.root, "--max-size", "1")
    assert code == 2 and f"pytest-sme2 cache prune: refusing to prune {d.cache}: it is not a pytest-sme2 cache" in err
    assert "thesis.tex" in err and "--cache-dir" in err and "Traceback" not in err
    assert d.everything() == files
    (d.cache / "thesis.tex").unlink()
    home = tmp_path / "home"  # an artifacts folder pointed at a folder of other things
    (home / "photos").mkdir(parents=True)
    code, _, err = _prune(capsys, d.root, "--artifacts-dir", str(home), "--max-size", "1")
    assert code == 2 and f"refusing to prune {home}" in err and (home / "photos").is_dir()


def test_a_folder_in_or_holding_the_baselines_folder_is_refused(
    sme2_dir: Sme2Dir, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    (d.root / "pytest.ini").write_text("[pytest]\nsme2_baselines_dir = .sme2/artifacts\n")
    code, _, err = _prune(capsys, d.root, "--max-size", "1")
    assert code == 2 and "baselines folder" in err and "refusing to prune the artifacts folder" in err, err
    assert all(s.is_dir() for s in d.sessions)


def test_the_folders_and_bound_default_to_the_projects_ini(
    sme2_dir: Sme2Dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = sme2_dir
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(
        f"[pytest]\nsme2_cache_dir = ../.sme2/cache\nsme2_artifacts_dir = {d.artifacts}\nsme2_keep_sessions = 1\n"
        "sme2_max_size = 0\n"
    )
    code, out, err = _prune(capsys, project)
    assert code == 0, err
    assert [os.path.abspath(p) for p in _removed(out)] == [str(d.sessions[0])], out


@pytest.mark.parametrize(
    "args, says",
    [
        (["--max-size", "5XB"], "--max-size 5XB is not a size: write a number and a unit, e.g. 5GB"),
        (["--max-size=-1GB"], "--max-size -1GB is not a size"),
        (["--keep-sessions", "two"], "--keep-sessions two is not a whole number of session folders"),
        (["--cache-dir", "{root}/nowhere"], "no cache folder at {root}/nowhere: give --cache-dir the folder"),
        (["--cache-dir", "{root}/a-file"], "the cache folder {root}/a-file is a regular file, not a folder"),
        (["--artifacts-dir", "{root}/a-fifo"], "the artifacts folder {root}/a-fifo is a FIFO (named pipe), not a"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("x")
    os.mkfifo(tmp_path / "a-fifo")
    (tmp_path / ".sme2" / "cache").mkdir(parents=True)
    code, out, err = _prune(capsys, tmp_path, *[a.format(root=tmp_path) for a in args])
    assert code == 2 and f"pytest-sme2 cache prune: {says.format(root=tmp_path)}" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_ini_bound_that_is_not_a_size_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".sme2" / "cache").mkdir(parents=True)
    (tmp_path / "pytest.ini").write_text("[pytest]\nsme2_max_size = lots\n")
    code, _, err = _prune(capsys, tmp_path)
    assert code == 2 and f"ini sme2_max_size in {tmp_path / 'pytest.ini'} is not a size" in err, err


def test_no_folders_at_all_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _prune(capsys, tmp_path)
    assert code == 2 and "nothing to prune" in err and "--project" in err
