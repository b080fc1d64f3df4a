"""Fault-injection sweep: every fault case of issue 13 and the earlier bad-input lists, as a user meets them.

Each case is a real pytest session (or ``pytest-sme2`` command) in a throwaway
project on the tiny model, host target, run in a subprocess. The sweep prints
one table: case, what happened (exit code and outcome), and the first line of
the message the user sees, and checks that no case shows a Python traceback and
that no case harms what it planted (a victim file behind a link, a record the case
checks; issue 23).
Ctrl-C / SIGTERM on every target are tests/system/test_interrupt.py (they need the
process tree inspected with ps); they are not repeated here.

    python benchmarks/fault_sweep.py [--out results.json] [--only TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

from _common import REPO, machine

TINY = (REPO / "tests" / "conftest.py").read_text().split("TINY_MODEL = '''", 1)[1].split("'''", 1)[0]
TEST = """
import pytest

@pytest.mark.model("tiny")
def test_tiny(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""
INI = "[pytest]\nsme2_model_dirs = models\nsme2_target = host\nsme2_runs = 5\nsme2_warmup = 1\nsme2_max_rounds = 1\n"
MESSAGE = re.compile(
    r"(ERROR: .*|WARNING: .*|note: .*|E +.*Error: .*|Failed: .*|\w+Error: .*|pytest-sme2 \w+: .*"
    r"|DamagedCacheEntryWarning: .*)"
)


def _project(root: Path, test: str = TEST, ini: str = INI) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / "tiny.py").write_text(TINY)
    (root / "pytest.ini").write_text(ini)
    (root / "test_case.py").write_text(textwrap.dedent(test))
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_sme2.cli", *args], capture_output=True, text=True, timeout=300)


# ----------------------------------------------------------------------------- cases
def weird_ids(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root, TEST.replace("def test_tiny(", '@pytest.mark.parametrize("c", ["a/b", "a_b"])\ndef test_tiny(c, '))
    _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    files = sorted((root / "baselines").rglob("*.json"))
    result = _pytest(root, "-o", "sme2_baseline_missing=fail")
    result.stdout += f"\nbaseline files: {len(files)} for 2 tests"
    return result


def malformed_baseline(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    [path] = (root / "baselines").rglob("*.json")
    data = json.loads(path.read_text())
    for record in data["profiles"].values():
        record["shares"] = "abc"
    path.write_text(json.dumps(data))
    return _pytest(root)


def artifacts_unwritable(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    (root / "blocker").write_text("a file")
    return _pytest(root, "--sme2-no-baselines", "--sme2-artifacts-dir=blocker/artifacts")


def cache_unwritable(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    (root / "blocker").write_text("a file")
    return _pytest(root, "--sme2-no-baselines", "--sme2-cache-dir=blocker/cache")


def read_only_baseline(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    [path] = (root / "baselines").rglob("*.json")
    path.chmod(0o444)
    return _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")


def cli_wrong_shape(root: Path) -> subprocess.CompletedProcess[str]:
    (root / "summary.json").write_text('{"schema_version": 1, "tests": [{"nodeid": "t"}]}')
    return _cli("report", str(root))


def cli_unwritable_out(root: Path) -> subprocess.CompletedProcess[str]:
    (root / "summary.json").write_text('{"schema_version": 1, "tests": []}')
    (root / "blocker").write_text("a file")
    return _cli("report", str(root), "--out", str(root / "blocker" / "out"))


def cli_nan(root: Path) -> subprocess.CompletedProcess[str]:
    return _cli("compare", "a.etdp", "b.etdp", "--min-speedup", "nan")


def cli_garbage_etdump(root: Path) -> subprocess.CompletedProcess[str]:
    (root / "x.etdp").write_text("not an etdump")
    return _cli("analyze", str(root / "x.etdp"))


def _odd_runner(root: Path, line: str) -> subprocess.CompletedProcess[str]:
    _project(root)
    runner = root / "odd_runner"
    runner.write_text(f"#!/bin/sh\necho '{line}'\n")
    runner.chmod(0o755)
    return _pytest(
        root, "--sme2-no-baselines", "--sme2-target=local", f"--sme2-runner={runner}", "--sme2-latency-reference=off"
    )


def runner_not_json(root: Path) -> subprocess.CompletedProcess[str]:
    return _odd_runner(root, "PYTEST_SME2_RESULT {not json")


def runner_empty_json(root: Path) -> subprocess.CompletedProcess[str]:
    return _odd_runner(root, "PYTEST_SME2_RESULT {}")


def runs_zero(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-runs=0")


def runs_zero_ini(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root, ini=INI.replace("sme2_runs = 5", "sme2_runs = 0"))
    return _pytest(root)


def timeout(root: Path) -> subprocess.CompletedProcess[str]:
    _project(
        root,
        TEST.replace(
            '@pytest.mark.model("tiny")', '@pytest.mark.perf(runs=10000000, warmup=0)\n@pytest.mark.model("tiny")'
        ),
    )
    return _pytest(root, "--sme2-no-baselines", "--sme2-timeout=2")


def failed_export(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    (root / "models" / "broken.py").write_text(
        "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
        "        raise ValueError('broken forward')\n"
        "def get_eager_model():\n    return M()\ndef get_example_inputs():\n    return (torch.ones(2),)\n"
    )
    (root / "test_case.py").write_text(TEST.replace('"tiny"', '"broken"'))
    return _pytest(root, "--sme2-no-baselines")


def unknown_model(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    (root / "test_case.py").write_text(TEST.replace('"tiny"', '"no_such_model"'))
    return _pytest(root, "--sme2-no-baselines")


def bad_marker(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root, TEST.replace('@pytest.mark.model("tiny")', '@pytest.mark.model("tiny", dtype="fp64")'))
    return _pytest(root, "--sme2-no-baselines")


def unknown_target(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-target=phone")


# ------------------------------------------------------- issue 23: links, history, session folders
# A case that plants a link writes VICTIM_TEXT into ``root / "victim"``; the sweep checks it is intact.
VICTIM_TEXT = "DATA\n"


def _victim(root: Path) -> Path:
    victim = root / "victim"
    victim.write_text(VICTIM_TEXT)
    return victim


def adb_claim_link(root: Path) -> subprocess.CompletedProcess[str]:
    """23.1: a claims folder made first by someone else, with a link planted at the lock."""
    victim = _victim(root)
    claims = root / "pytest-sme2-adb-claims"
    claims.mkdir()
    (claims / "127.0.0.1_5037_X.lock").symlink_to(victim)
    code = (
        "import sys\nfrom pytest_sme2.run.targets.adb import DeviceClaim as C\n"  # the command,
        "try:\n    C.try_claim(('127.0.0.1', 5037), 'X')\n"  # its error printed as the adb target shows it
        "except Exception as exc:\n    sys.exit(f'{type(exc).__name__}: {exc}')\n"
    )
    mine = root / f"pytest-sme2-adb-claims-{os.getuid()}"
    mine.mkdir(mode=0o777)
    mine.chmod(0o777)
    (mine / "127.0.0.1_5037_X.lock").symlink_to(victim)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(root)},
    )


def report_link_and_markup(root: Path) -> subprocess.CompletedProcess[str]:
    """23.2: a shared session folder with summary.md -> victim and a target name that is shell code."""
    _project(root)
    session = _pytest(root, "--sme2-no-baselines", "--sme2-artifacts-dir", "art")
    if session.returncode != 0:
        return session
    (folder,) = (root / "art").iterdir()
    data = json.loads((folder / "summary.json").read_text())
    data["target"]["name"] = "x`;touch /tmp/PWNED;#"
    (folder / "summary.json").write_text(json.dumps(data))
    (folder / "summary.md").unlink()
    (folder / "summary.md").symlink_to(_victim(root))
    result = _cli("report", str(folder))
    if "``x`;touch /tmp/PWNED;#``" not in (folder / "summary.md").read_text():
        result.stdout += "\nFAILED: the target name is not one code span in summary.md"
    return result


def history_is_a_folder(root: Path) -> subprocess.CompletedProcess[str]:
    """23.4: --sme2-history names a folder."""
    _project(root)
    (root / "hdir").mkdir()
    return _pytest(root, "--sme2-no-baselines", "--sme2-history", "hdir")


def history_is_a_link(root: Path) -> subprocess.CompletedProcess[str]:
    """23.4: the history write fails mid-session (a link planted at its name): outputs kept, exit 1."""
    _project(root)
    (root / "h.jsonl").symlink_to(_victim(root))
    result = _pytest(root, "--sme2-no-baselines", "--sme2-history", "h.jsonl", "--sme2-artifacts-dir", "art")
    if not list((root / "art").glob("session-*/summary.json")):
        result.stdout += "\nFAILED: no summary.json"
    return result


def history_cut_short(root: Path) -> subprocess.CompletedProcess[str]:
    """23.7: a history file without a final newline, then a session appends to it."""
    _project(root)
    _pytest(root, "--sme2-no-baselines", "--sme2-history", "h.jsonl")
    (root / "h.jsonl").write_text((root / "h.jsonl").read_text()[:-40])
    _pytest(root, "--sme2-no-baselines", "--sme2-history", "h.jsonl")
    result = _cli("history", str(root / "h.jsonl"), "--out", str(root / "out"))
    lines = (root / "h.jsonl").read_text().splitlines()
    if len(lines) != 2 or not lines[1].startswith("{") or not lines[1].endswith("}"):
        result.stdout += "\nFAILED: the new record was swallowed"
    return result


def sessions_in_two_pid_namespaces(root: Path) -> subprocess.CompletedProcess[str]:
    """23.8: two sessions as pid 1 of their own pid namespaces, in one second, into one artifacts folder."""
    _project(root)
    command = [
        "unshare",
        "--pid",
        "--fork",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--sme2-no-baselines",
        "--sme2-artifacts-dir",
        "art",
    ]
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    both = [
        subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=900) for p in both]
    folders = list((root / "art").glob("session-*"))
    result = subprocess.CompletedProcess(command, max(p.returncode for p in both), outs[0][0], outs[0][1])
    if len(folders) != 2:
        result.stdout += f"\nFAILED: {len(folders)} session folder(s) for two sessions"
    return result


def artifact_written_over(root: Path) -> subprocess.CompletedProcess[str]:
    """Issue 23.5: a program written over a session's artifact must not become the cached export."""
    _project(root)
    _pytest(root, "--sme2-no-baselines")
    [artifact] = (root / ".sme2" / "artifacts").glob("session-*/*/*.pte")
    with open(artifact, "r+b") as handle:  # in place, as `cp other.pte <artifact>` writes
        handle.truncate(0)
        handle.write(b"another program")
    return _pytest(root, "--sme2-no-baselines")


def _damaged_entry(root: Path, damage: Callable[[Path], object]) -> subprocess.CompletedProcess[str]:
    """Issue 23.5: a session after one whose export cache entry was then damaged by ``damage(entry)``."""
    _project(root)
    _pytest(root, "--sme2-no-baselines")
    [entry] = (root / ".sme2" / "cache").glob("tiny-*")
    damage(entry)
    return _pytest(root, "--sme2-no-baselines")


def cache_pte_truncated(root: Path) -> subprocess.CompletedProcess[str]:
    return _damaged_entry(root, lambda e: (e / "model.pte").write_bytes((e / "model.pte").read_bytes()[:1000]))


def cache_meta_list(root: Path) -> subprocess.CompletedProcess[str]:
    return _damaged_entry(root, lambda e: (e / "export.json").write_text("[]"))


def cache_meta_not_number(root: Path) -> subprocess.CompletedProcess[str]:
    def damage(entry: Path) -> None:
        meta = json.loads((entry / "export.json").read_text())
        (entry / "export.json").write_text(json.dumps({**meta, "export_seconds": "fast"}))

    return _damaged_entry(root, damage)


def cache_facts_missing_key(root: Path) -> subprocess.CompletedProcess[str]:
    def damage(entry: Path) -> None:
        facts = json.loads((entry / "program.json").read_text())
        del facts["planned_buffers"]
        (entry / "program.json").write_text(json.dumps(facts))

    return _damaged_entry(root, damage)


def forged_baseline_date(root: Path) -> subprocess.CompletedProcess[str]:
    """52.1: a baseline's recorded.date forged with workflow commands, then a real regression (the partitioner
    turned off) under GitHub Actions: no output line may be a command the plugin did not write."""
    _project(root)
    _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    [path] = (root / "baselines").rglob("*.json")
    data = json.loads(path.read_text())
    data["recorded"]["date"] += "\n::error file=evil.py,line=1::FORGED\n::stop-commands::tok"
    path.write_text(json.dumps(data))
    (root / "test_case.py").write_text(textwrap.dedent(TEST.replace('"tiny"', '"tiny", partitioner="none"')))
    summary = root / "step_summary.md"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTEST_ADDOPTS": "", "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    commands = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.lstrip().startswith("::") and not line.startswith("::error file=test_case.py,")
    ]
    items = [
        line
        for line in (summary.read_text() if summary.exists() else "").splitlines()
        if "::" in line and re.match(r"\s*(?:[-*+]\s+)*\\?::", line)
    ]
    result.stdout += f"\nseen: {len(commands)} forged command line(s) printed, {len(items)} in the job summary"
    if commands or items:
        result.stdout += "\nFAILED: a line from the baseline file reached the output as a workflow command"
    return result


def cache_entry_other_inputs(root: Path) -> subprocess.CompletedProcess[str]:
    """52.2: an export cache entry's inputs.pt replaced by other values, its digest in export.json updated: whole
    by its own digests, but not this model's export. It must be refused, not run."""
    import hashlib

    def damage(entry: Path) -> None:
        import torch

        torch.save((torch.zeros(1, 3, 16, 16),), entry / "inputs.pt")
        meta = json.loads((entry / "export.json").read_text())
        meta["files"]["inputs.pt"] = hashlib.sha256((entry / "inputs.pt").read_bytes()).hexdigest()
        (entry / "export.json").write_text(json.dumps(meta))

    result = _damaged_entry(root, damage)
    if "answers for another" not in result.stdout + result.stderr and "example inputs" not in result.stdout:
        result.stdout += "\nFAILED: the entry was used without a word"
    return result


M4 = (REPO / "pytest_sme2" / "profile" / "devices" / "apple-m4.toml").read_text()


def _device_file(root: Path, old: str, new: str) -> subprocess.CompletedProcess[str]:
    """52 weak: a session given a copy of the shipped device file with ``old`` replaced by ``new``."""
    assert old in M4, old
    _project(root)
    (root / "dev.toml").write_text(M4.replace(old, new).replace('name = "apple-m4"', 'name = "dev"'))
    return _pytest(root, "--sme2-no-baselines", "--sme2-device=dev.toml")


def weak_device_tiny_rate(root: Path) -> subprocess.CompletedProcess[str]:
    return _device_file(root, "per_ns.mopa_fp32 = 3.896", "per_ns.mopa_fp32 = 1e-320")


def weak_device_half_thread(root: Path) -> subprocess.CompletedProcess[str]:
    return _device_file(root, "threads = 1", "threads = 0.5")


def weak_device_huge_svl(root: Path) -> subprocess.CompletedProcess[str]:
    return _device_file(root, "svl_bits = 512", "svl_bits = 1e300")


def weak_device_300mb(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    with (root / "dev.toml").open("wb") as out:
        out.truncate(300 << 20)  # sparse: the case costs no disk
    return _pytest(root, "--sme2-no-baselines", "--sme2-device=dev.toml")


def weak_device_fifo(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    os.mkfifo(root / "dev.toml")
    return _pytest(root, "--sme2-no-baselines", "--sme2-device=dev.toml")


def weak_device_dev_zero(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-no-baselines", "--sme2-device=/dev/zero")


def _forged_summary(root: Path, forge: Callable[[dict], object]) -> subprocess.CompletedProcess[str]:
    """52 weak: `pytest-sme2 check` of a judged session whose summary.json records were then forged by ``forge``."""
    _project(root)
    _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    _pytest(root)
    summary = max((root / ".sme2" / "artifacts").glob("session-*/summary.json"), key=lambda p: p.stat().st_mtime)
    data = json.loads(summary.read_text())
    [test] = data["tests"]
    for record in test["sme2_gate_input"]["files"][0]["records"].values():
        forge(record)
    summary.write_text(json.dumps(data))
    result = _cli("check", str(summary.parent))
    if result.returncode == 0:
        result.stdout += "\nFAILED: a summary with non-finite numbers was judged, exit 0"
    return result


def weak_check_nan_planned_bytes(root: Path) -> subprocess.CompletedProcess[str]:
    return _forged_summary(root, lambda record: record["memory"].update(planned_bytes=float("nan")))


def weak_check_nan_latencies(root: Path) -> subprocess.CompletedProcess[str]:
    def forge(record: dict) -> None:
        record["latency"] = {key: float("nan") for key in record["latency"]}
        record["samples_ms"] = [float("nan")] * len(record["samples_ms"])

    return _forged_summary(root, forge)


def weak_check_2gb_summary(root: Path) -> subprocess.CompletedProcess[str]:
    with (root / "summary.json").open("wb") as out:
        out.truncate(2 << 30)  # sparse
    started = time.monotonic()
    result = _cli("check", str(root))
    result.stdout += f"\nseen: refused after {time.monotonic() - started:.1f} s"
    return result


def weak_baselines_folder_linked_outside(root: Path) -> subprocess.CompletedProcess[str]:
    """52 weak: the baselines fingerprint folder replaced by a link to a folder outside the repository."""
    _project(root / "repo")
    _pytest(root / "repo", "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    [folder] = (root / "repo" / "baselines").iterdir()
    outside = root / "outside"
    folder.rename(outside)
    folder.symlink_to(outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    result = _pytest(root / "repo", "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    if {p.name: p.read_bytes() for p in outside.iterdir()} != before:
        result.stdout += "\nFAILED: the update wrote through the link, outside the repository"
    return result


def weak_history_fifo(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    os.mkfifo(root / "h.jsonl")
    return _pytest(root, "--sme2-no-baselines", "--sme2-history", "h.jsonl")


def cache_verify_program_replaced(root: Path) -> subprocess.CompletedProcess[str]:
    """52.2 (what a hit cannot see): the XNNPACK entry's model.pte replaced by the portable program, its digest in
    export.json updated; sessions use it without a word, `pytest-sme2 cache verify` exports it again and differs."""
    import hashlib

    _project(root)
    _pytest(root, "--sme2-no-baselines")
    (root / "test_case.py").write_text(textwrap.dedent(TEST.replace('"tiny"', '"tiny", partitioner="none"')))
    _pytest(root, "--sme2-no-baselines")
    cache = root / ".sme2" / "cache"
    [xnnpack], [portable] = cache.glob("tiny-fp32-xnnpack-*"), cache.glob("tiny-fp32-none-*")
    (xnnpack / "model.pte").write_bytes((portable / "model.pte").read_bytes())
    meta = json.loads((xnnpack / "export.json").read_text())
    meta["files"]["model.pte"] = hashlib.sha256((xnnpack / "model.pte").read_bytes()).hexdigest()
    (xnnpack / "export.json").write_text(json.dumps(meta))
    # all: the reference program has one too; the models are the project's own (issue 64)
    result = _cli("cache", "verify", str(cache), "--sample", "99", "--project", str(root))
    differs = [line.strip() for line in result.stdout.splitlines() if line.lstrip().startswith("DIFFERS")]
    result.stdout += "".join(f"\nseen: {line[:160]}" for line in differs)
    if result.returncode != 1:
        result.stdout += "\nFAILED: the replaced program was not found"
    return result


# ------------------------------------------------- issue 64: one reader, and an audit that never runs a writer's code
def _two_recipes(root: Path) -> tuple[Path, Path, Path]:
    """A project whose cache holds the tiny model exported with XNNPACK and without: the cache and both entries."""
    _project(root)
    _pytest(root, "--sme2-no-baselines")
    (root / "test_case.py").write_text(textwrap.dedent(TEST.replace('"tiny"', '"tiny", partitioner="none"')))
    _pytest(root, "--sme2-no-baselines")
    (root / "test_case.py").write_text(textwrap.dedent(TEST))
    cache = root / ".sme2" / "cache"
    [xnnpack], [portable] = cache.glob("tiny-fp32-xnnpack-*"), cache.glob("tiny-fp32-none-*")
    return cache, xnnpack, portable


def _edit_meta(entry: Path, change: dict) -> None:
    meta = json.loads((entry / "export.json").read_text())
    (entry / "export.json").write_text(json.dumps({**meta, **change}))


def verify_runs_no_source_the_entry_names(root: Path) -> subprocess.CompletedProcess[str]:
    """64.1: evil.py dropped in an entry and named as its "source": verify imported it and said ok."""
    cache, xnnpack, _ = _two_recipes(root)
    marker = root / "imported"
    (xnnpack / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n" + TINY)
    _edit_meta(xnnpack, {"source": str(xnnpack / "evil.py")})
    result = _cli("cache", "verify", str(cache), "--sample", "5", "--project", str(root))
    verdicts = [line.strip()[:160] for line in result.stdout.splitlines() if f"  {xnnpack.name}  " in line]
    result.stdout += "".join(f"\nseen: {line}" for line in verdicts)
    if marker.exists():
        result.stdout += "\nFAILED: cache verify ran the evil.py the entry named"
    return result


def verify_forged_program_without_source(root: Path) -> subprocess.CompletedProcess[str]:
    """64.2: another recipe's program, its digest updated and "source" null: --sample 99 said ok, exit 0."""
    import hashlib

    cache, xnnpack, portable = _two_recipes(root)
    (xnnpack / "model.pte").write_bytes((portable / "model.pte").read_bytes())
    meta = json.loads((xnnpack / "export.json").read_text())
    files = {**meta["files"], "model.pte": hashlib.sha256((xnnpack / "model.pte").read_bytes()).hexdigest()}
    _edit_meta(xnnpack, {"files": files, "source": None})
    result = _cli("cache", "verify", str(cache), "--sample", "99", "--project", str(root))
    result.stdout += "".join(f"\nseen: {line.strip()[:160]}" for line in result.stdout.splitlines()[-1:])
    if result.returncode != 1:
        result.stdout += "\nFAILED: the forged program passed the audit"
    return result


def crafted_program_size(root: Path) -> subprocess.CompletedProcess[str]:
    """64.3: a cache entry's .pte whose extended header gives a program size of 2^62, its digest updated (a writer
    of the cache): a bare MemoryError from run/kernel_libraries.py on every target."""
    import hashlib

    _project(root)
    _pytest(root, "--sme2-no-baselines")
    [entry] = (root / ".sme2" / "cache").glob("tiny-*")
    data = bytearray((entry / "model.pte").read_bytes())
    data[16:24] = (1 << 62).to_bytes(8, "little")
    (entry / "model.pte").write_bytes(bytes(data))
    meta = json.loads((entry / "export.json").read_text())
    digest = hashlib.sha256(bytes(data)).hexdigest()
    _edit_meta(entry, {"files": {**meta["files"], "model.pte": digest}})
    result = _pytest(root, "--sme2-no-baselines")
    if "MemoryError" in result.stdout + result.stderr:
        result.stdout += "\nFAILED: a MemoryError"
    return result


def _recorded_baseline(root: Path) -> Path:
    _project(root)
    _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    [path] = (root / "baselines").rglob("*.json")
    return path


def baseline_fifo(root: Path) -> subprocess.CompletedProcess[str]:
    """64.4: the baseline file is a FIFO: the session hung forever in its setup hook, printing nothing."""
    path = _recorded_baseline(root)
    path.unlink()
    os.mkfifo(path)
    return _pytest(root, "-o", "sme2_replicas=auto")


def baseline_dev_zero(root: Path) -> subprocess.CompletedProcess[str]:
    """64.5: the baseline file is a link to /dev/zero (a pull request can commit one): read until memory ran out."""
    path = _recorded_baseline(root)
    path.unlink()
    path.symlink_to("/dev/zero")
    return _pytest(root)


def _llm_export(root: Path, change: str) -> subprocess.CompletedProcess[str]:
    """export_llm of a context-64 config then a context-128 one (tiny Llama params), ``change`` applied to the
    cache between them, then the 128 one again: which program it answers with, and what it said."""
    (root / "params.json").write_text(
        json.dumps({"dim": 64, "n_layers": 1, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256, "multiple_of": 32})
    )
    script = textwrap.dedent(
        f"""
        import json, shutil, sys, warnings
        from pathlib import Path
        from pytest_sme2.export.llm_export import export_llm
        warnings.simplefilter("always")
        root = Path({str(root)!r})
        def config(context):
            return {{"base.params": str(root / "params.json"), "export.max_seq_length": context,
                     "export.max_context_length": context, "backend.xnnpack.enabled": True}}
        short = export_llm(config(64), root / "cache", "tiny_llama")
        long = export_llm(config(128), root / "cache", "tiny_llama")
        meta = json.loads((short.directory / "export.json").read_text())
        if {change!r} == "swap":
            shutil.rmtree(long.directory)
            shutil.copytree(short.directory, long.directory)
            meta["cache_key"] = long.cache_key
        else:
            meta = json.loads((long.directory / "export.json").read_text())
            meta["export_seconds"] = "fast"
        (long.directory / "export.json").write_text(json.dumps(meta))
        again = export_llm(config(128), root / "cache", "tiny_llama")
        same = again.path.read_bytes() == short.path.read_bytes()
        print(f"seen: from_cache {{again.from_cache}}, the context-64 program: {{same}}")
        if again.from_cache or same:
            print("FAILED: another config's or a damaged entry was used")
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, cwd=root)


def llm_entry_of_another_config(root: Path) -> subprocess.CompletedProcess[str]:
    """64.6: a context-64 export_llm entry copied to the context-128 config's folder with cache_key edited."""
    return _llm_export(root, "swap")


def llm_entry_damaged(root: Path) -> subprocess.CompletedProcess[str]:
    """64.7: an export_llm entry's export_seconds "fast": a bare ValueError."""
    return _llm_export(root, "damage")


def fifo_in_export_entry(root: Path) -> subprocess.CompletedProcess[str]:
    """64.8: a FIFO in place of an export cache entry's model.pte (a tar archive restores one): the session hung in
    file_sha256, and so did cache verify."""
    _project(root)
    _pytest(root, "--sme2-no-baselines")
    [entry] = (root / ".sme2" / "cache").glob("tiny-*")
    (entry / "model.pte").unlink()
    os.mkfifo(entry / "model.pte")
    verify = _cli("cache", "verify", str(root / ".sme2" / "cache"), "--sample", "0", "--project", str(root))
    result = _pytest(root, "--sme2-no-baselines")
    result.stdout += "".join(f"\nseen: verify: {line.strip()[:150]}" for line in verify.stdout.splitlines()[-1:])
    return result


def _outputs_model(root: Path, returns: str) -> subprocess.CompletedProcess[str]:
    """Issue 23.9: a model whose forward returns ``returns`` (of ``y``), run and checked against eager."""
    _project(
        root,
        TEST.replace('"tiny"', '"outs"')
        .replace(
            "etdump_profile(exported_pte, runner())",
            "assert_outputs_match(etdump_profile(exported_pte, runner()), exported_pte)",
        )
        .replace("import pytest", "import pytest\nfrom pytest_sme2 import assert_outputs_match"),
    )
    (root / "models" / "outs.py").write_text(
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        torch.manual_seed(0)\n        self.conv = torch.nn.Conv2d(3, 4, 3)\n"
        f"    def forward(self, x):\n        y = torch.relu(self.conv(x))\n        return {returns}\n"
        "def get_eager_model():\n    return M().eval()\n"
        "def get_example_inputs():\n    return (torch.ones(1, 3, 8, 8),)\n"
    )
    return _pytest(root, "--sme2-no-baselines")


def outputs_dict(root: Path) -> subprocess.CompletedProcess[str]:
    return _outputs_model(root, '{"a": y, "b": 2 * y}')


def outputs_nested(root: Path) -> subprocess.CompletedProcess[str]:
    return _outputs_model(root, "(y, (2 * y, y + 1))")


def outputs_none(root: Path) -> subprocess.CompletedProcess[str]:
    return _outputs_model(root, "None")


def timeout_huge(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-timeout=1e300")


def timeout_infinite_in_test(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root, TEST.replace("runner()", 'runner(timeout=float("inf"))'))
    return _pytest(root, "--sme2-no-baselines")


def worker_wait_fails(root: Path) -> subprocess.CompletedProcess[str]:
    # The wait for the first test's answer fails once; the second test (another model, other run count)
    # asserts that its profile is its own: outcome "1 failed, 1 passed" is the fix, "2 failed" the bug.
    _project(
        root,
        """
        import select, types
        import pytest
        from pytest_sme2.run.targets import host

        @pytest.mark.model("tiny")
        def test_first(exported_pte, runner, etdump_profile, monkeypatch):
            def fail(*args):
                monkeypatch.undo()
                raise OverflowError("injected")
            monkeypatch.setattr(host, "select", types.SimpleNamespace(select=fail))
            etdump_profile(exported_pte, runner(runs=7))

        @pytest.mark.model("linear")
        def test_second(exported_pte, runner, etdump_profile):
            assert etdump_profile(exported_pte, runner(runs=3)).runs == 3
        """,
    )
    (root / "models" / "linear.py").write_text(
        "import torch\ndef get_eager_model():\n    return torch.nn.Linear(8, 4)\n"
        "def get_example_inputs():\n    return (torch.ones(2, 8),)\n"
    )
    return _pytest(root, "--sme2-no-baselines")


def sigkill_of_pytest(root: Path) -> subprocess.CompletedProcess[str]:
    # CI's `kill -9 -- -PGID` of a pytest mid-run: exit 0 here means no process it started was left 5 s
    # later (the stdout line lists any that were); the run itself ends with SIGKILL, so it has no outcome.
    sys.path.insert(0, str(REPO / "tests"))
    from helpers_faults import alive, descendants, wait_for

    _project(root, TEST.replace("runner()", "runner(runs=10_000_000, warmup=0)"))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sme2-no-baselines"]
    inner = subprocess.Popen(
        command,
        cwd=root,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = (
        wait_for(
            lambda: (d := descendants(inner.pid)) and any("host_worker" in a for a in d.values()) and d,
            timeout=600,
            interval=0.5,
        )
        or {}
    )
    time.sleep(2)
    started = {**started, **descendants(inner.pid)}
    os.killpg(inner.pid, 9)
    inner.wait()
    wait_for(lambda: not alive(started), timeout=5)
    left = alive(started)
    for pid in left:  # what the bug leaves would burn the CPU under every later case
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(
        command,
        int(bool(left) or not started),
        f"processes left 5 s after SIGKILL: {left or 'none'} (of {len(started)})\n",
        "",
    )


def threads_huge(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-threads=100000")


def _etdump(path: Path, conv: str, portable: str, instruction: int) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from helpers_etdump import RunSpec, write_etdump

    write_etdump(
        path,
        [
            RunSpec(
                e2e_ns=1_000_000 + 1000 * i,
                delegate_call_ns=800_000,
                delegate_instr=1,
                delegate_ops=[(conv, 500_000)],
                portable_ops=[(portable, 60_000, 80_000, instruction)],
            )
            for i in range(5)
        ],
    )
    return path


def weak_artifact_javascript_link(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: summary.json with session_dir null and an artifact path javascript:alert(1)."""
    _project(root)
    session = _pytest(root, "--sme2-no-baselines", "--sme2-artifacts-dir", "art")
    if session.returncode != 0:
        return session
    (folder,) = (root / "art").iterdir()
    data = json.loads((folder / "summary.json").read_text())
    data["session_dir"] = None
    for test in data["tests"]:
        for profile in test["profiles"]:
            profile["artifacts"] = {"timed_etdump": "javascript:alert(1)"}
    (folder / "summary.json").write_text(json.dumps(data))
    result = _cli("report", str(folder))
    if 'href="javascript:' in (folder / "report.html").read_text():
        result.stdout += "\nFAILED: a javascript: link in report.html"
    return result


def weak_analyze_4gb(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: analyze of a 4 GB file that is no ETDump (sparse): refused from its header at once."""
    with open(root / "big.etdp", "wb") as handle:
        handle.write(b"PK\x03\x04 not an etdump")
        handle.truncate(4 * 2**30)
    started = time.monotonic()
    result = _cli("analyze", str(root / "big.etdp"))
    if time.monotonic() - started > 15:
        result.stdout += "\nFAILED: the file was read before its header was checked"
    return result


def weak_compare_two_programs(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: compare of ETDumps of two different programs."""
    a = _etdump(root / "a.etdp", "Convolution (NHWC, F32) IGEMM #1", "native_call_native_layer_norm.out", 5)
    b = _etdump(root / "b.etdp", "Fully Connected (NC, F32) GEMM #1", "native_call_softmax.out", 4)
    result = _cli("compare", str(a), str(b))
    if "DIFFERENT PROGRAMS" not in result.stdout:
        result.stdout += "\nFAILED: no warning that the programs differ"
    return result


def weak_history_bad_line_and_nan(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: a history with one damaged line and NaN values around a +50% step."""
    from pytest_sme2.gate import history

    lines = [
        json.dumps(
            history.digest(
                "t.py::test_m",
                {
                    "model": "m",
                    "recipe": "r",
                    "variant": "v",
                    "latency": {"median_ms": float("nan") if i in (3, 15) else 6.0 if i < 12 else 9.0},
                },
                {"session": f"s{i:02d}", "time": f"2026-11-{i + 1:02d}", "commit": None, "target": "local"},
            )
        )
        for i in range(24)
    ]
    lines[7] = "{half a line"
    (root / "h.jsonl").write_text("\n".join(lines) + "\n")
    result = _cli("history", str(root / "h.jsonl"), "--out", str(root / "out"))
    if "from session s12" not in result.stdout:
        result.stdout += "\nFAILED: the +50% step was not found"
    return result


def weak_deep_summary(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: a summary.json nested 200000 deep."""
    (root / "s").mkdir()
    (root / "s" / "summary.json").write_text('{"schema_version": 1, "tests": ' + "[" * 200_000 + "]" * 200_000 + "}")
    return _cli("report", str(root / "s"))


# ------------------------------------------- issue 23: the weak list and the output that misleads, as a user meets them
# A case that checks what it saw prints it on a line starting "seen: " (shown in the outcome column) and marks a bad
# outcome with a line starting "FAILED:" (the harm column).
def weak_program_json_umask(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: a session under umask 002 with its own cache dir: program.json must be group-writable (0664)."""
    _project(root)
    old = os.umask(0o002)
    try:
        result = _pytest(root, "--sme2-no-baselines", "--sme2-cache-dir", "shared-cache")
    finally:
        os.umask(old)
    entries = list((root / "shared-cache").glob("tiny-*/program.json"))
    if not entries:
        result.stdout += "\nFAILED: no cache entry with a program.json"
        return result
    mode = entries[0].stat().st_mode & 0o777
    pte = entries[0].with_name("model.pte").stat().st_mode & 0o777
    result.stdout += f"\nseen: umask 002: program.json {mode:04o}, model.pte {pte:04o}"
    if mode != 0o664:
        result.stdout += f"\nFAILED: program.json is {mode:04o}, not 0664 as umask 002 gives"
    return result


def _outside_code_spans(line: str) -> str:
    """``line`` with escaped backticks and whole code spans (CommonMark: a run of n backticks to the next run of
    exactly n) removed; what is left is what a renderer reads as markdown and HTML."""
    line = line.replace("\\`", "")
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", line)


def weak_markdown_id_with_markup(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: a test id with a backtick and <b>html</b> in summary.md and history.md (escaped, heading intact)."""
    _project(
        root, TEST.replace("def test_tiny(", '@pytest.mark.parametrize("c", ["a`b<b>html</b>"])\n' "def test_tiny(c, ")
    )
    result = _pytest(root, "--sme2-no-baselines", "--sme2-artifacts-dir", "art", "--sme2-history", "h.jsonl")
    summaries = list((root / "art").glob("session-*/summary.md"))
    # history.md names a test only at a change point: the session's real record, 24 times, +50% from the 13th on.
    record = json.loads((root / "h.jsonl").read_text().splitlines()[0]) if (root / "h.jsonl").exists() else {}
    lines = [
        json.dumps(
            {
                **record,
                "session": f"s{i:02d}",
                "time": f"2026-11-{i + 1:02d}T00:00:00Z",
                "quantities": {
                    **record.get("quantities", {}),
                    "median_ms": record.get("quantities", {}).get("median_ms", 1) * (1.5 if i >= 12 else 1),
                },
            }
        )
        for i in range(24)
    ]
    (root / "h.jsonl").write_text("\n".join(lines) + "\n")
    history = _cli("history", str(root / "h.jsonl"), "--out", str(root / "hist"))
    result.stderr += history.stderr
    for path in summaries + [root / "hist" / "history.md"]:
        if not path.exists():
            result.stdout += f"\nFAILED: no {path.name}"
            continue
        lines = [line for line in path.read_text().splitlines() if "html" in line]
        raw = [line for line in lines if "<b>" in _outside_code_spans(line) or "`" in _outside_code_spans(line)]
        headings = [line for line in lines if line.startswith("#")]
        result.stdout += f"\nseen: {path.name}: {len(lines)} line(s) with the id, {len(raw)} with raw markup" + (
            f"; heading {headings[0]}" if headings else ""
        )
        if raw or not lines:
            result.stdout += f"\nFAILED: {path.name}: {(raw or ['the id is missing'])[0]}"
    return result


def weak_sigterm_bisect(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: SIGTERM to `pytest-sme2 bisect` while a step runs: branch checked out again, no bisect left."""
    repo, marker = root / "repo", root / "step.pid"
    _project(repo)
    (repo / ".gitignore").write_text(".sme2/\n__pycache__/\n")

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "sweep@example.com")
    git("config", "user.name", "sweep")
    slow = (
        f"\n    import os, pathlib, time\n    pathlib.Path({str(marker)!r}).write_text(str(os.getpid()))\n"
        "    time.sleep(300)\n"
    )
    for subject, body in (("perf test", ""), ("perf test, slow", slow), ("perf test fails", "\n    assert False\n")):
        (repo / "test_case.py").write_text(textwrap.dedent(TEST) + body)
        git("add", "-A")
        git("commit", "-q", "-m", subject)
    good = git("rev-list", "--max-parents=0", "HEAD").stdout.strip()
    command = [
        sys.executable,
        "-m",
        "pytest_sme2.cli",
        "bisect",
        good,
        "main",
        "--out",
        str(root / "out"),
        "--",
        "test_case.py",
        "-p",
        "no:cacheprovider",
        "--sme2-no-baselines",
    ]
    bisect = subprocess.Popen(
        command,
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
    )
    deadline = time.monotonic() + 600
    while not marker.exists() and bisect.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    mid = (repo / ".git" / "BISECT_START").exists()
    bisect.send_signal(15)
    try:
        out, err = bisect.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        bisect.kill()
        out, err = bisect.communicate()
        out += "\nFAILED: pytest-sme2 bisect still ran 120 s after SIGTERM"
    head = git("rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    status = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    bisecting = (repo / ".git" / "BISECT_START").exists() or (repo / ".git" / "BISECT_LOG").exists()
    out += (
        f"\nseen: signal sent {'mid-bisect (a step running)' if mid and marker.exists() else 'NOT mid-bisect'};"
        f" after SIGTERM: HEAD {head}, bisect in progress: {'yes' if bisecting else 'no'}, "
        f"git status: {status or 'clean'}"
    )
    if head != "main" or bisecting or status or not (mid and marker.exists()):
        out += "\nFAILED: the repository is not as it was, or the signal did not arrive mid-bisect"
    if marker.exists():  # the step's pytest must end with the bisect (as tests/cli/test_bisect.py: within 5 s)
        sys.path.insert(0, str(REPO / "tests"))
        from helpers_faults import alive, wait_for

        step = {int(marker.read_text()): "the step's pytest"}
        wait_for(lambda: not alive(step), timeout=5)
        for pid in alive(step):
            out += f"\nFAILED: the step's pytest {pid} still runs 5 s after the bisect ended"
            os.kill(pid, 9)
    return subprocess.CompletedProcess(command, bisect.returncode, out, err)


def weak_history_cli_folder(root: Path) -> subprocess.CompletedProcess[str]:
    """23 weak: `pytest-sme2 history` given a folder (was called "does not exist")."""
    (root / "hdir").mkdir()
    result = _cli("history", str(root / "hdir"), "--out", str(root / "out"))
    if "does not exist" in result.stdout + result.stderr:
        result.stdout += '\nFAILED: a folder is called "does not exist"'
    return result


def output_baseline_before_first_commit(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: a baseline recorded in a git repository with no commits yet, then a session it fails."""
    _project(root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    record = _pytest(root, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    # The terminal names when a baseline was recorded in a failure's baseline block: a variant it lacks, required.
    result = _pytest(root, "--sme2-threads=2", "-o", "sme2_baseline_missing=fail")
    files = list((root / "baselines").rglob("*.json"))
    recorded = json.loads(files[0].read_text()).get("recorded") if files else None
    said = [line.strip() for line in (record.stdout + result.stdout).splitlines() if "recorded" in line]
    if not said:
        result.stdout += "\nFAILED: the terminal never says when the baseline was recorded"
    result.stdout += f"\nseen: baseline file recorded {json.dumps(recorded)}" + (
        f"; terminal: {said[0]}" if said else ""
    )
    if not files or "commit ?" in record.stdout + result.stdout + (files[0].read_text() if files else ""):
        result.stdout += '\nFAILED: no baseline, or it says "at commit ?"'
    return result


def _pytest_verbosity(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest at the verbosity given (no -q), its output into a pipe as in a CI log."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--sme2-no-baselines", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
    )


TWO_TESTS = TEST.replace("def test_tiny(", '@pytest.mark.parametrize("c", [1, 2])\ndef test_tiny(c, ')


def output_progress_pipe(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: two tests at default verbosity into a pipe: the result letters stay on pytest's one line."""
    _project(root, TWO_TESTS)
    result = _pytest_verbosity(root)
    line = [line for line in result.stdout.splitlines() if line.startswith("test_case.py")]
    result.stdout += f"\nseen: {' '.join(line[0].split()) if line else 'no test_case.py line'} (spaces squeezed)"
    if not re.fullmatch(r"test_case\.py \.\. +\[100%\]", line[0] if line else ""):
        result.stdout += "\nFAILED: the result letters are not one line `test_case.py .. [100%]`"
    return result


HEAVY = (
    "import torch\ndef get_eager_model():\n    torch.manual_seed(0)\n    return torch.nn.Sequential("
    "torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1), "
    "torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1)).eval()\n"
    "def get_example_inputs():\n    return (torch.ones(1, 3, 128, 128),)\n"
)


def output_progress_verbose(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: -v on a model of some ms per run, 40 runs: `sme2: running ... run i/40` lines and the PASSED line."""
    _project(root, TEST.replace('"tiny"', '"heavy"'))
    (root / "models" / "heavy.py").write_text(HEAVY)
    result = _pytest_verbosity(root, "-v", "--sme2-runs=40")
    running = [line for line in result.stdout.splitlines() if line.startswith("sme2: running")]
    runs = [line for line in running if re.search(r" run \d+/40$", line)]
    passed = [line for line in result.stdout.splitlines() if re.match(r"test_case\.py::test_tiny PASSED", line)]
    result.stdout += (
        f"\nseen: {len(running)} `sme2: running` line(s), {len(runs)} of them `run i/40`"
        + (f", e.g. {runs[0]!r}" if runs else "")
        + f"; {len(passed)} PASSED line(s)"
    )
    if not runs or len(passed) != 1:
        result.stdout += "\nFAILED: no `sme2: running ... run i/40` line, or the test's PASSED line is missing"
    return result


def output_one_emulated_run(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: one emulated run of the tiny model: no latency interval or CV of one run, operators sorted."""
    _project(root)
    result = _pytest(root, "--sme2-no-baselines", "--sme2-target=emulated", "--sme2-runs=1", "-rA")
    lines = result.stdout.splitlines()
    measure = [line.strip() for line in lines if re.search(r"E2E|per inference", line)]
    bad = [line.strip() for line in lines if re.search(r"95% CI [\d.]+|CV [\d.]+%", line)]
    heading = next((i for i, line in enumerate(lines) if "heaviest operators" in line), None)
    shares = (
        [
            float(m.group(1))
            for line in (lines[heading + 1 :] if heading is not None else [])
            if (m := re.match(r"\s+([\d.]+)%\s", line))
        ]
        if heading is not None
        else []
    )
    result.stdout += (
        f"\nseen: {measure[0] if measure else 'no E2E or per-inference line'}; "
        f"{lines[heading].strip() if heading is not None else 'no operator list'} "
        f"{', '.join(f'{v}%' for v in shares)}"
    )
    if bad:
        result.stdout += f"\nFAILED: an interval or CV of one emulated run: {bad[0]}"
    if not shares or shares != sorted(shares, reverse=True):
        result.stdout += "\nFAILED: the heaviest operators are missing or not sorted"
    return result


ON_OFF = """
import pytest

@pytest.mark.model("tiny")
def test_on_off(exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner(sme2=True))
    etdump_profile(exported_pte, runner(sme2=False))
"""


def _emulated_on_off(root: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """An emulated session of the tiny model with SME2 on and off: (its result, on's ETDump, off's ETDump)."""
    _project(root, ON_OFF)
    result = _pytest(root, "--sme2-no-baselines", "--sme2-target=emulated", "--sme2-runs=1")
    found = {
        kind: sorted(root.glob(f".sme2/artifacts/session-*/*/*-emulated_sme2_{kind}_*/timed.etdp"))
        for kind in ("on", "off")
    }
    if not found["on"] or not found["off"]:
        result.stdout += "\nFAILED: the emulated session left no ETDumps of SME2 on and off"
        return result, root / "missing-on.etdp", root / "missing-off.etdp"
    return result, found["on"][0], found["off"][0]


def output_compare_emulated(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: pytest-sme2 compare of emulated ETDumps (SME2 off, on): no emulator milliseconds as a headline."""
    session, on, off = _emulated_on_off(root)
    if "FAILED:" in session.stdout:
        return session
    result = _cli("compare", str(off), str(on))
    ms = [line for line in result.stdout.splitlines() if re.search(r"\d ms\b|median [\d.]+ ms", line)]
    headline = next((line for line in result.stdout.splitlines() if "B against A" in line or "speed" in line), "")
    result.stdout += f"\nseen: {headline.strip()[:160] or 'no headline'}"
    if ms:
        result.stdout += f"\nFAILED: emulator milliseconds shown: {ms[0].strip()[:120]}"
    return result


def output_analyze_emulated(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: pytest-sme2 analyze of an emulated run: instructions, operators sorted by them, no ms."""
    session, on, _ = _emulated_on_off(root)
    if "FAILED:" in session.stdout:
        return session
    result = _cli("analyze", str(on))
    text = result.stdout
    top = text.split("top operators:")[1].split("portable operators:")[0] if "top operators:" in text else ""
    shares = [float(m) for m in re.findall(r"([\d.]+)%\s*$", top, re.MULTILINE)]
    result.stdout += (
        f"\nseen: top operators by {'instructions' if 'instructions' in top else 'something else'}, "
        f"shares {', '.join(f'{v}%' for v in shares[:5])}"
    )
    if " ms" in text.split("categories:")[-1] or not shares or shares != sorted(shares, reverse=True):
        result.stdout += "\nFAILED: emulator ms shown, or operators missing or unsorted"
    return result


def output_html_page(root: Path) -> subprocess.CompletedProcess[str]:
    """23 output: the pytest-html page of a passing perf test: the plugin's table on top (passed rows open
    collapsed), the session report linked, and the SME path named apart from SME instruction shares."""
    _project(root)
    result = _pytest(root, "--sme2-no-baselines", "--html=report.html", "--self-contained-html")
    page = (root / "report.html").read_text(errors="replace") if (root / "report.html").exists() else ""
    start = page.find("pytest-sme2: performance summary")
    top = page[start : page.find("</div>", start)] if start >= 0 else ""
    linked = bool(re.search(r'href="[^"]*session-[^"]*/report\.html"', top))
    names = sorted(set(re.findall(r"SME (?:path|instructions|share)[^<:(]{0,30}", page)))
    result.stdout += (
        f"\nseen: summary block on top: {'yes' if top else 'no'}, test_tiny in it: "
        f"{'yes' if 'test_tiny' in top else 'no'}, session report linked: {'yes' if linked else 'no'}; "
        f"SME names: {'; '.join(n.strip() for n in names[:4])}"
    )
    if not top or "test_tiny" not in top or not linked:
        result.stdout += (
            "\nFAILED: the page hides the plugin's numbers behind collapsed rows or does not link the report"
        )
    if any(n.startswith("SME share") for n in names):
        result.stdout += '\nFAILED: "SME share" beside "SME path": two metrics with nearly one name'
    return result


CASES: list[tuple[str, Callable[[Path], subprocess.CompletedProcess[str]]]] = [
    ("13.2 ids that clean alike (a/b, a_b)", weird_ids),
    ('13.3 baseline with shares: "abc"', malformed_baseline),
    ("13.4 artifacts folder cannot be created", artifacts_unwritable),
    ("13.4 export cache cannot be created", cache_unwritable),
    ("13.4 read-only baseline, update", read_only_baseline),
    ("13.5 report: summary.json of the wrong shape", cli_wrong_shape),
    ("13.5 report --out unwritable", cli_unwritable_out),
    ("13.5 compare --min-speedup nan", cli_nan),
    ("analyze a garbage ETDump", cli_garbage_etdump),
    ("13.6 runner prints {not json", runner_not_json),
    ("13.6 runner prints {}", runner_empty_json),
    ("13.7 --sme2-runs=0", runs_zero),
    ("13.7 ini sme2_runs = 0", runs_zero_ini),
    ("13.7 run hits its timeout", timeout),
    ("13.8 export fails in forward", failed_export),
    ("unknown model", unknown_model),
    ("unknown dtype in the marker", bad_marker),
    ("unknown --sme2-target", unknown_target),
    ("23.1 link planted at the adb claim lock", adb_claim_link),
    ("23.2 report: summary.md -> victim, shell code as target name", report_link_and_markup),
    ("23.4 --sme2-history is a folder", history_is_a_folder),
    ("23.4 history write fails mid-session (a link)", history_is_a_link),
    ("23.7 history cut short, then appended", history_cut_short),
    ("23.8 two sessions as pid 1 in one second", sessions_in_two_pid_namespaces),
    ("23.5 a program written over the artifact, next session", artifact_written_over),
    ("23.5 cache entry's model.pte truncated", cache_pte_truncated),
    ("23.5 cache entry's export.json is []", cache_meta_list),
    ('23.5 cache entry\'s export_seconds: "fast"', cache_meta_not_number),
    ("23.5 cache entry's program.json without planned_buffers", cache_facts_missing_key),
    ("23.9 assert_outputs_match, model returns a dict", outputs_dict),
    ("23.9 assert_outputs_match, model returns (y, (2y, y+1))", outputs_nested),
    ("23.9 model returns None", outputs_none),
    ("23.3 --sme2-timeout=1e300", timeout_huge),
    ('23.3 runner(timeout=float("inf"))', timeout_infinite_in_test),
    ("23.3 the wait for an answer fails, the next test runs another model", worker_wait_fails),
    ("23.6 SIGKILL to pytest's process group mid-run (host)", sigkill_of_pytest),
    ("23 weak --sme2-threads=100000", threads_huge),
    ("23 weak report: artifact path javascript:alert(1), session_dir null", weak_artifact_javascript_link),
    ("23 weak analyze a 4 GB file that is no ETDump", weak_analyze_4gb),
    ("23 weak compare ETDumps of two different programs", weak_compare_two_programs),
    ("23 weak history: a damaged line, NaN values around a +50% step", weak_history_bad_line_and_nan),
    ("23 weak report: summary.json nested 200000 deep", weak_deep_summary),
    ("23 weak program.json honours the umask (002, own cache dir)", weak_program_json_umask),
    ("23 weak markdown report: a test id with a backtick and `<b>html</b>`", weak_markdown_id_with_markup),
    ("23 weak SIGTERM to pytest-sme2 bisect mid-step", weak_sigterm_bisect),
    ("23 weak pytest-sme2 history given a folder", weak_history_cli_folder),
    ("23 output baseline recorded before the first commit", output_baseline_before_first_commit),
    ("23 output progress, default verbosity into a pipe, two tests", output_progress_pipe),
    ("23 output progress with -v, 40 runs of some ms each", output_progress_verbose),
    ("23 output one emulated run (--sme2-runs=1): no interval/CV, operators sorted", output_one_emulated_run),
    ("23 output compare of emulated ETDumps, SME2 off vs on", output_compare_emulated),
    ("23 output analyze of an emulated run", output_analyze_emulated),
    ("23 output pytest-html page of a passing perf test", output_html_page),
    ("52.1 baseline recorded.date forged with ::error lines, regression under GitHub Actions", forged_baseline_date),
    ("52.2 export cache entry: other inputs.pt, its digest updated", cache_entry_other_inputs),
    ("52.2 cache verify: an entry's model.pte replaced, its digest updated", cache_verify_program_replaced),
    ("52 weak device file: a rate of 1e-320", weak_device_tiny_rate),
    ("52 weak device file: threads = 0.5", weak_device_half_thread),
    ("52 weak device file: svl_bits = 1e300", weak_device_huge_svl),
    ("52 weak device file: 300 MB", weak_device_300mb),
    ("52 weak device file: a FIFO", weak_device_fifo),
    ("52 weak device file: /dev/zero", weak_device_dev_zero),
    ("52 weak check: NaN planned_bytes in summary.json", weak_check_nan_planned_bytes),
    ("52 weak check: NaN latencies in summary.json", weak_check_nan_latencies),
    ("52 weak check: a 2 GB summary.json", weak_check_2gb_summary),
    (
        "52 weak baselines fingerprint folder: a link outside the repository, update",
        weak_baselines_folder_linked_outside,
    ),
    ("52 weak --sme2-history is a FIFO", weak_history_fifo),
    ("64.1 cache verify: evil.py in an entry, named as its source", verify_runs_no_source_the_entry_names),
    ("64.2 cache verify --sample 99: a forged program, its source null", verify_forged_program_without_source),
    ("64.3 a cache entry's .pte with a program size of 2^62, its digest updated", crafted_program_size),
    ("64.4 the baseline file is a FIFO (sme2_replicas = auto)", baseline_fifo),
    ("64.5 the baseline file is a link to /dev/zero", baseline_dev_zero),
    ("64.6 export_llm: a context-64 entry under the context-128 key", llm_entry_of_another_config),
    ('64.7 export_llm: an entry\'s export_seconds "fast"', llm_entry_damaged),
    ("64.8 a FIFO in place of an export cache entry's model.pte (session and cache verify)", fifo_in_export_entry),
]


def _outcome(result: subprocess.CompletedProcess[str]) -> str:
    tail = [line for line in result.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    summary = re.sub(r"=+|\bin [\d.]+s.*", "", tail[-1]).strip() if tail else "no tests ran"
    return f"exit {result.returncode}; {summary}"


def _message(result: subprocess.CompletedProcess[str]) -> str:
    text = result.stderr + "\n" + result.stdout
    found = [m.group(0).strip() for line in text.splitlines() if (m := MESSAGE.search(line))]
    found = [f for f in found if "PytestBenchmarkWarning" not in f]
    return (found[0] if found else "(no message)")[:220]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = parser.parse_args()
    rows = []
    for name, case in CASES:
        if args.only not in name:
            continue
        with tempfile.TemporaryDirectory(prefix="sme2-fault-") as tmp:
            started = time.monotonic()
            result = case(Path(tmp))
            text = result.stdout + result.stderr
            victim = Path(tmp) / "victim"
            harmed = victim.exists() and victim.read_text() != VICTIM_TEXT
            rows.append(
                {
                    "case": name,
                    "outcome": _outcome(result),
                    "message": _message(result),
                    "traceback": "Traceback (most recent call last)" in text,
                    "harm": harmed or "FAILED:" in result.stdout,
                    "seconds": round(time.monotonic() - started, 1),
                    "extra": [
                        line
                        for line in result.stdout.splitlines()
                        if line.startswith(("baseline files:", "seen: ", "FAILED: "))
                    ],
                }
            )
        print(f"{rows[-1]['case']}: {rows[-1]['outcome']}", file=sys.stderr)
    print("| case | outcome | message the user sees | traceback | harm |\n|---|---|---|---|---|")
    for row in rows:
        extra = "".join(f" ({line.removeprefix('seen: ')})" for line in row["extra"]).replace("|", "/")
        print(
            f"| {row['case']} | {row['outcome']}{extra} | `{row['message'].replace('|', '/')}` | "
            f"{'YES' if row['traceback'] else 'no'} | {'YES' if row['harm'] else 'no'} |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "cases": rows}, indent=1))
    if any(row["traceback"] or row["harm"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
