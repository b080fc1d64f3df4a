"""Folders that cannot be written (issue 13, case 4): one clear error naming the folder and what moves it.

Read-only folders and full disks are real here: small tmpfs mounts (root in
CI; the tests skip with the reason where mounting is not allowed). Running as
root, permission bits do not stop writes, so a read-only mount stands in for
"not writable"; a file where a folder should be covers it without mounting.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from pytest_sme2.system import writable_folders

TEST = """
import pytest

@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


@contextlib.contextmanager
def _tmpfs(path: Path, size: str = "64k", read_only: bool = False) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); needs root with CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _clean(result: pytest.RunResult) -> str:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "PermissionError" not in text and "OSError" not in text
    return text


def test_an_artifacts_folder_that_cannot_be_created_is_one_usage_error(sme2_project: pytest.Pytester) -> None:
    (sme2_project.path / "blocker").write_text("a file where the artifacts folder should go")
    sme2_project.makepyfile(test_gate=TEST)
    result = sme2_project.runpytest_inprocess("--sme2-artifacts-dir=blocker/artifacts")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = _clean(result)
    assert f"the artifacts folder {sme2_project.path / 'blocker' / 'artifacts'} cannot be created" in text
    assert "is a file, not a folder" in text and "--sme2-artifacts-dir (or ini sme2_artifacts_dir)" in text


@pytest.mark.parametrize(
    ("args", "what", "moved_by"),
    [
        (
            ("--sme2-artifacts-dir={ro}/artifacts",),
            "artifacts folder",
            "--sme2-artifacts-dir (or ini sme2_artifacts_dir)",
        ),
        (("--sme2-cache-dir={ro}/cache",), "export cache", "--sme2-cache-dir (or ini sme2_cache_dir)"),
        (
            ("--sme2-baselines-dir={ro}/baselines", "--sme2-update-baselines"),
            "baselines folder",
            "--sme2-baselines-dir (or ini sme2_baselines_dir)",
        ),
    ],
    ids=["artifacts", "cache", "baselines-update"],
)
def test_a_read_only_folder_stops_the_session_before_the_first_test(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], what: str, moved_by: str
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)  # the baselines case needs the gate on
    sme2_project.makepyfile(test_gate=TEST)
    with _tmpfs(sme2_project.path / "ro", read_only=True) as ro:
        result = sme2_project.runpytest_inprocess(*(a.format(ro=ro) for a in args))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = _clean(result)
    assert f"the {what} {ro}" in text and "is not writable: it is on a read-only file system" in text
    assert moved_by in text


@pytest.mark.parametrize(
    ("option", "what"), [("--sme2-cache-dir", "export cache"), ("--sme2-artifacts-dir", "artifacts folder")]
)
def test_a_folder_made_read_only_is_refused_as_root_too(sme2_project: pytest.Pytester, option: str, what: str) -> None:
    """A user's trial (as root, as CI containers run): after chmod -R a-w on the cache, new export and result
    entries were written into the dr-xr-xr-x folders without a word; a user would have been refused. Root is."""
    import os

    if os.geteuid() != 0:
        pytest.skip("as another user the kernel refuses the write itself (the read-only mount case above)")
    sme2_project.makepyfile(test_gate=TEST)
    folder = sme2_project.mkdir("locked")
    folder.chmod(0o555)
    try:
        result = sme2_project.runpytest_inprocess(f"{option}={folder}")
    finally:
        folder.chmod(0o755)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = _clean(result)
    assert (
        f"the {what} {folder} is not writable: it is read-only (mode 0555), and pytest-sme2 does not write "
        "into it even as root"
        in text
        and f"{option} (or ini" in text
    )
    assert list(folder.iterdir()) == []


def test_as_root_a_read_only_parent_of_a_folder_to_create_is_no_refusal(tmp_path: Path) -> None:
    """A review: the root rule read a parent's mode (Fedora's / is 0555, RHEL's /root 0550), so ~/.cache/sme2 under
    /root was refused as "read-only". It is the folder's own mode that says someone made it read-only."""
    import os

    from pytest_sme2.system.writable_folders import Place, check_writable

    if os.geteuid() != 0:
        pytest.skip("the rule is root's")
    parent = tmp_path / "home"
    parent.mkdir()
    parent.chmod(0o550)
    try:
        check_writable(Place("export cache", parent / ".cache" / "sme2", "--sme2-cache-dir"))  # no error
        with pytest.raises(Exception, match=r"is read-only \(mode 0550\)"):
            check_writable(Place("export cache", parent, "--sme2-cache-dir"))
    finally:
        parent.chmod(0o755)


def test_read_only_baselines_are_fine_when_only_read(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    sme2_project.makepyfile(test_gate=TEST)
    with _tmpfs(sme2_project.path / "ro", read_only=True) as ro:
        result = sme2_project.runpytest_inprocess(f"--sme2-baselines-dir={ro}", "-o", "sme2_baseline_missing=warn")
    result.assert_outcomes(passed=1)


def test_a_full_disk_fails_the_test_naming_the_folder_and_the_session_goes_on(sme2_project: pytest.Pytester) -> None:
    sme2_project.makepyfile(test_gate=TEST + TEST.replace("test_tiny", "test_second").replace("import pytest", ""))
    # 8 kB (two pages): the session's first files fit, a run's ETDump and outputs do not (the .pte and ETRecord are
    # linked from the export cache, not copied, so the tiny model's program no longer fills the folder by itself;
    # at 32 kB the runs fit and only the report fails)
    with _tmpfs(sme2_project.path / "small", size="8k") as small:
        result = sme2_project.runpytest_inprocess(f"--sme2-artifacts-dir={small}")
    result.assert_outcomes(failed=2)
    text = _clean(result)
    assert "StorageError: cannot write the artifacts folder: no space left on the device at " in text
    assert "--sme2-artifacts-dir (or ini sme2_artifacts_dir)" in text


def test_baselines_are_written_readable_and_a_read_only_one_is_not_replaced(
    sme2_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    sme2_project.makepyfile(test_gate=TEST)
    update = ("--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    sme2_project.runpytest_inprocess(*update).assert_outcomes(passed=1)
    [path] = (sme2_project.path / "baselines").rglob("*.json")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's private 0600

    path.chmod(0o444)
    before = path.read_text()
    result = sme2_project.runpytest_inprocess(*update)
    result.assert_outcomes(failed=1)
    text = _clean(result)
    assert f"baseline {path} is read-only (mode 0444)" in text and "chmod u+w" in text
    assert path.read_text() == before and json.loads(before)["test"] == "test_gate.py::test_tiny"
    assert "0 written, 1 refused" in text  # a user's trial: the summary said "0 refused" for such files

    # A user's trial (as root, as CI containers run): chmod -R a-w baselines refused the old files, but a new
    # test's baseline was written into the read-only folder. Root's writes are not stopped by the mode bits.
    folder = path.parent
    sme2_project.makepyfile(test_new=TEST)
    folder.chmod(0o555)
    try:
        fresh = sme2_project.runpytest_inprocess(*update, "test_new.py")
        fresh.assert_outcomes(failed=1)
        assert f"its folder {folder} is read-only (mode 0555)" in _clean(fresh)
        assert sorted(p.name for p in folder.iterdir()) == [path.name]
    finally:
        folder.chmod(0o755)


def test_explain_names_the_place_that_holds_the_path(tmp_path: Path) -> None:
    cache = writable_folders.Place("export cache", tmp_path / "cache", "--sme2-cache-dir (or ini sme2_cache_dir)")
    artifacts = writable_folders.Place("artifacts folder", tmp_path / "art", "--sme2-artifacts-dir (or ini x)")
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "src.pte"))
    full.filename2 = str(tmp_path / "art" / "s" / "t" / "x.pte")
    message = str(writable_folders.explain(full, [cache, artifacts]))
    assert message.startswith("cannot write the artifacts folder: no space left on the device at ")
    assert "--sme2-artifacts-dir" in message and "--sme2-cache-dir" not in message
    denied = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "cache" / "locks"))
    assert "cannot write the export cache: permission denied" in str(
        writable_folders.explain(denied, [cache, artifacts])
    )
    elsewhere = PermissionError(errno.EACCES, "Permission denied", "/etc/shadow")
    assert writable_folders.explain(elsewhere, [cache, artifacts]) is None  # not ours: the real error stays
    anonymous = OSError(errno.ENOSPC, "No space left on device")
    assert "no space left on the device" in str(writable_folders.explain(anonymous, [cache]))


def test_one_read_only_rule_for_places_and_baselines(tmp_path: Path) -> None:
    """A re-read: baselines.write refused a folder by its owner's write bit, walking up to the nearest existing
    parent (so /root, 0550 on RHEL, refused a baseline folder still to be created), while check_writable refused a
    place by its own mode having no write bit at all. One rule now (writable_folders.read_only_mode): a file or
    folder with no write bit at all is not written, a parent's mode is not read."""
    from pytest_sme2.errors import BaselineError
    from pytest_sme2.gate import baselines

    def baseline(path: Path) -> baselines.Baseline:
        return baselines.Baseline(path=path, test_id="t.py::t", fingerprint="fp", profiles={}, target={}, recorded={})

    assert writable_folders.read_only_mode(tmp_path) is None
    parent = tmp_path / "home"
    parent.mkdir()
    parent.chmod(0o550)
    try:
        assert writable_folders.read_only_mode(parent) == 0o550
        if os.geteuid() == 0:  # as another user the kernel refuses the folder's creation itself
            written = baselines.write(baseline(parent / "baselines" / "fp" / "t.json"))
            assert json.loads(written.read_text())["test"] == "t.py::t"
        with pytest.raises(BaselineError, match=r"its folder .*home is read-only \(mode 0550\)"):
            baselines.write(baseline(parent / "t.json"))
    finally:
        parent.chmod(0o755)
    group_writable = tmp_path / "shared"
    group_writable.mkdir()
    group_writable.chmod(0o575)  # some write bit: the kernel decides, as for check_writable's places
    try:
        assert writable_folders.read_only_mode(group_writable) is None
    finally:
        group_writable.chmod(0o755)
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    # a file is replaced by a rename, which its own mode never stops: its owner's write bit is the owner's word
    # (a review: a 0464 file, chmod u-w under umask 002, was replaced)
    for mode in (0o444, 0o464):
        kept.chmod(mode)
        with pytest.raises(BaselineError, match=rf"kept.json is read-only \(mode {mode:04o}\)"):
            baselines.write(baseline(kept))
        assert kept.read_text() == "{}"
    kept.chmod(0o644)
    assert writable_folders.read_only_mode(kept) is None
