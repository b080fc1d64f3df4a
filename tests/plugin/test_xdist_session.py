"""One ``pytest -n 2`` session of a real project on the host target, and what must hold of it under pytest-xdist.

Why one session for four properties: each ``pytest -n 2`` subprocess costs 15-30 s on a 2-core machine (three
interpreters, and in each worker the first trace imports torch.export and ExecuTorch's exporter), and four
tests each started their own: baseline updates, the history, the report and the export cache (93 s of `make
test` in stop 44's rehearsal, issue 25). One session that updates baselines, appends to a history, writes the
session outputs and exports into a cache of its own gives every assertion they made.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers_gate import UPDATE
from helpers_versions import needs_binding_etdump

from conftest import INNER_SESSION_ENV, TINY_MODEL, quick_host_ini
from pytest_sme2.gate import history

TESTS = 4  # two a worker


@dataclass(frozen=True)
class XdistRun:
    root: Path
    cache: Path
    marks: Path
    stdout: str
    returncode: int

    def session_dir(self) -> Path:
        (session,) = (self.root / "artifacts").glob("session-*")
        return session


@pytest.fixture(scope="module")
def xdist_run(tmp_path_factory: pytest.TempPathFactory) -> XdistRun:
    root = tmp_path_factory.mktemp("xdist-project")
    cache, marks = root / "cache", root / "marks"  # a cache of its own: the test counts its exports
    marks.mkdir()
    (root / "models").mkdir()
    (root / "models" / "shared.py").write_text(TINY_MODEL)
    ini = quick_host_ini(cache, "sme2_history = history/sme2.jsonl", "filterwarnings = ignore")
    (root / "pytest.ini").write_text(ini)
    (root / "test_many.py").write_text(f"""
import os, pytest

@pytest.mark.parametrize("i", range({TESTS}))
@pytest.mark.model("shared")
def test_shared(exported_pte, runner, etdump_profile, i):
    p = etdump_profile(exported_pte, runner(threads=1 + i % 2))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join({str(marks)!r}, f"{{worker}}-{{i}}"), "w") as f:
        f.write(f"{{exported_pte.from_cache}} {{p.artifacts['timed_etdump']}}")

def test_not_perf():
    pass
""")
    # As the suite's other inner sessions run (tests/conftest.py): only the plugins they need, the gate on.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, **INNER_SESSION_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            *UPDATE,
            "--sme2-artifacts-dir=artifacts",
            "-p",
            "no:cacheprovider",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return XdistRun(root, cache, marks, done.stdout + done.stderr, done.returncode)


@needs_binding_etdump
def test_the_session_passes(xdist_run: XdistRun) -> None:
    assert xdist_run.returncode == 0, xdist_run.stdout
    assert f"{TESTS + 1} passed" in xdist_run.stdout


@needs_binding_etdump
def test_workers_updating_baselines_at_once_lose_nothing(xdist_run: XdistRun) -> None:
    files = sorted((xdist_run.root / "baselines").rglob("*.json"))
    assert sorted(json.loads(p.read_text())["test"] for p in files) == sorted(
        f"test_many.py::test_shared[{i}]" for i in range(TESTS)
    )
    assert not list((xdist_run.root / "baselines").rglob("*.tmp"))
    assert f"{TESTS} written" in xdist_run.stdout  # the controller saw every worker's outcome


@needs_binding_etdump
def test_workers_append_to_one_history_without_losing_a_line(xdist_run: XdistRun) -> None:
    """(A later session appending after these lines: tests/gate/test_history.py, a history cut short.)"""
    rows = history.load(xdist_run.root / "history" / "sme2.jsonl")
    assert len(rows) == TESTS  # one profile per test, from two workers
    assert len({row["session"] for row in rows}) == 1
    assert len({row["test"] for row in rows}) == TESTS
    assert all(row["quantities"]["median_ms"] > 0 for row in rows)
    # the gate's latency quantity (model / reference program per run pair) is kept too, not only raw time
    assert all(row["quantities"]["relative_latency"] > 0 for row in rows)
    json.dumps(rows)  # plain data


@needs_binding_etdump
def test_the_controller_gathers_every_workers_tests(xdist_run: XdistRun) -> None:
    assert "sme2: running" not in xdist_run.stdout  # -q, and workers never print progress
    ids = [f"test_shared[{i}]" for i in range(TESTS)]
    lines = xdist_run.stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if "sme2 performance summary" in line)
    assert all(any(line.startswith(f"{test} ") for line in lines[start:]) for test in ids), xdist_run.stdout
    summary = json.loads((xdist_run.session_dir() / "summary.json").read_text())
    # in node-id order, whichever worker finished first
    assert [t["nodeid"].rsplit("::", 1)[1] for t in summary["tests"]] == ids
    log = (xdist_run.session_dir() / "progress.log").read_text()
    # each announcement names its worker (one a test); which worker ran which test is xdist's choice
    announced = re.findall(r"\[(gw[01])\] sme2: running shared fp32-xnnpack \[[^]]*\]: ", log)
    assert len(announced) == TESTS and set(announced) == {"gw0", "gw1"}


@needs_binding_etdump
def test_workers_export_once_and_share_the_session_folder(xdist_run: XdistRun) -> None:
    records = [p.read_text().split(" ", 1) for p in xdist_run.marks.iterdir()]
    assert len(records) == TESTS
    workers = {p.name.split("-")[0] for p in xdist_run.marks.iterdir()}
    assert len(workers) == 2, "both xdist workers should have run tests"
    fresh_exports = [cached for cached, _ in records if cached == "False"]
    assert len(fresh_exports) <= 1, f"exported {len(fresh_exports)} times: {records}"
    assert len([p for p in xdist_run.cache.iterdir() if p.name.startswith("shared-")]) == 1
    session_dirs = {next(p for p in Path(etdump).parents if p.name.startswith("session-")) for _, etdump in records}
    assert session_dirs == {xdist_run.session_dir()}, f"workers wrote to different session folders: {session_dirs}"


def test_the_folders_the_session_created_keep_out_of_git(xdist_run: XdistRun) -> None:
    """Workers create the session's folders; the controller, last to finish, gives each its .gitignore."""
    for folder in (xdist_run.root / "artifacts", xdist_run.cache):
        assert (folder / ".gitignore").read_text().splitlines()[-1] == "*", folder
