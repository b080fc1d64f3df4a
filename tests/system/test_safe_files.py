"""Files in shared folders are never written through links (issue 23, items 1, 2, 7; docs/history.md has the rule)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pytest_sme2.errors import StorageError
from pytest_sme2.run.targets.adb import DeviceClaim
from pytest_sme2.system.locks import locked
from pytest_sme2.system.safe_files import append_lines, private_folder, write_file


def test_write_file_replaces_a_planted_link_and_leaves_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    planted = tmp_path / "summary.md"
    planted.symlink_to(victim)
    write_file(planted, "report\n")
    assert victim.read_text() == "DATA\n"
    assert not planted.is_symlink() and planted.read_text() == "report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.md", "victim"]  # no temp file left


def test_write_file_honours_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        path = write_file(tmp_path / "shared.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


def test_write_file_into_a_folder_path_names_it(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(StorageError, match="it is a folder"):
        write_file(tmp_path / "out", "x")


def test_append_lines_starts_a_new_line_after_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text('{"a": 1}\n{"b": ')  # cut off mid-record, as `head -c` leaves it
    append_lines(path, ['{"c": 3}'])
    assert path.read_text().splitlines() == ['{"a": 1}', '{"b": ', '{"c": 3}']
    append_lines(path, ['{"d": 4}'])
    assert path.read_text().splitlines()[-1] == '{"d": 4}'


def test_append_lines_refuses_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    (tmp_path / "h.jsonl").symlink_to(victim)
    with pytest.raises(StorageError, match="symbolic link"):
        append_lines(tmp_path / "h.jsonl", ["{}"])
    assert victim.read_text() == "DATA\n"


def test_cache_lock_refuses_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    (tmp_path / "entry.lock").symlink_to(victim)
    with pytest.raises(StorageError, match="symbolic link"):
        with locked(tmp_path / "entry.lock"):
            pass
    assert victim.read_text() == "DATA\n"


def test_private_folder_is_created_0700_and_refuses_others(tmp_path: Path) -> None:
    mine = private_folder(tmp_path / "mine")
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(StorageError, match="others can write it"):
        private_folder(open_to_all)
    (tmp_path / "link").symlink_to(mine)
    with pytest.raises(StorageError, match="symbolic link"):
        private_folder(tmp_path / "link")


def test_device_claim_never_writes_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 1, as reported: another user creates the shared claims folder first and plants a link."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    for folder in (tmp_path / "pytest-sme2-adb-claims", DeviceClaim.path(("127.0.0.1", 5037), "X").parent):
        folder.mkdir(exist_ok=True)
        folder.chmod(0o777)  # as a folder someone else made in a shared /tmp
        (folder / "127.0.0.1_5037_X.lock").symlink_to(victim)
    with pytest.raises(StorageError, match="refusing to use"):
        DeviceClaim.try_claim(("127.0.0.1", 5037), "X")
    assert victim.read_text() == "DATA\n"


def test_device_claim_in_its_private_folder_refuses_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    folder = private_folder(DeviceClaim.path(("127.0.0.1", 5037), "X").parent)
    (folder / "127.0.0.1_5037_X.lock").symlink_to(victim)
    with pytest.raises(StorageError, match="symbolic link"):
        DeviceClaim.try_claim(("127.0.0.1", 5037), "X")
    assert victim.read_text() == "DATA\n"
    (folder / "127.0.0.1_5037_X.lock").unlink()
    claim = DeviceClaim.try_claim(("127.0.0.1", 5037), "X")
    assert claim is not None and DeviceClaim.try_claim(("127.0.0.1", 5037), "X") is None
    claim.release()


def test_progress_log_is_never_written_through_a_link(tmp_path: Path) -> None:
    """A progress.log planted as a link in a session folder: the line is dropped, the link's target untouched."""
    from types import SimpleNamespace

    from pytest_sme2.plugin.progress import LOG_NAME, Progress

    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    session = tmp_path / "session"
    session.mkdir()
    (session / LOG_NAME).symlink_to(victim)
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: None))
    Progress(config, lambda: session).say("sme2: exporting tiny fp32-xnnpack ...")  # type: ignore[arg-type]
    assert victim.read_text() == "DATA\n"
    honest = tmp_path / "honest"
    honest.mkdir()
    Progress(config, lambda: honest).say("sme2: exporting tiny fp32-xnnpack ...")  # type: ignore[arg-type]
    assert (honest / LOG_NAME).read_text().endswith("sme2: exporting tiny fp32-xnnpack ...\n")
