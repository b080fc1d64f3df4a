"""Session folder names (issue 23 item 8): unique even for two sessions with the same pid in the same second."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_sme2 import plugin


def test_two_sessions_with_one_pid_in_one_second_get_two_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two containers (their own pid namespaces) start pytest as pid 1 in the same second, into one
    # shared --sme2-artifacts-dir: their summaries and logs must not land in one folder.
    from pytest_sme2.measure import session

    monkeypatch.setattr(session.os, "getpid", lambda: 1)  # the folder's name is made in measure/session.py
    frozen = time.gmtime(1_800_000_000)
    monkeypatch.setattr(session.time, "gmtime", lambda *_: frozen)
    config = SimpleNamespace()  # the controller: no xdist workerinput
    first, second = (plugin._session_dir(config, tmp_path) for _ in range(2))  # type: ignore[arg-type]
    assert first != second
    assert first.name.startswith("session-20270115-080000-1-") and second.name.startswith("session-20270115-080000-1-")


def test_xdist_workers_write_into_their_controllers_folder(tmp_path: Path) -> None:
    worker = SimpleNamespace(workerinput={"sme2_session_dir": str(tmp_path / "session-x")})
    assert plugin._session_dir(worker, tmp_path) == tmp_path / "session-x"  # type: ignore[arg-type]
