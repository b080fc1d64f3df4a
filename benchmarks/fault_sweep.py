"""Fault-injection sweep: every fault case of issue 13 and the earlier bad-input lists, as a user meets them.

Each case is a real pytest session (or ``pytest-sme2`` command) in a throwaway
project on the tiny model, host target, run in a subprocess. The sweep prints
one table: case, what happened (exit code and outcome), and the first line of
the message the user sees, and checks that no case shows a Python traceback.
Ctrl-C / SIGTERM on every target are tests/test_interrupt.py (they need the
process tree inspected with ps); they are not repeated here.

    python benchmarks/fault_sweep.py [--out results.json]
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
MESSAGE = re.compile(r"(ERROR: .*|E +.*Error: .*|Failed: .*|\w+Error: .*|pytest-sme2 \w+: .*)")


def _project(root: Path, test: str = TEST, ini: str = INI) -> Path:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / "tiny.py").write_text(TINY)
    (root / "pytest.ini").write_text(ini)
    (root / "test_case.py").write_text(textwrap.dedent(test))
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=root,
                          capture_output=True, text=True, timeout=900, env=env)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_sme2.cli", *args], capture_output=True, text=True,
                          timeout=300)


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
    return _pytest(root, "--sme2-no-baselines", "--sme2-target=local", f"--sme2-runner={runner}",
                   "--sme2-latency-reference=off")


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
    _project(root, TEST.replace('@pytest.mark.model("tiny")',
                                '@pytest.mark.perf(runs=10000000, warmup=0)\n@pytest.mark.model("tiny")'))
    return _pytest(root, "--sme2-no-baselines", "--sme2-timeout=2")


def failed_export(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    (root / "models" / "broken.py").write_text(
        "import torch\nclass M(torch.nn.Module):\n    def forward(self, x):\n        raise ValueError('broken forward')\n"
        "def get_eager_model():\n    return M()\ndef get_example_inputs():\n    return (torch.ones(2),)\n")
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


def timeout_huge(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-timeout=1e300")


def timeout_infinite_in_test(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root, TEST.replace("runner()", 'runner(timeout=float("inf"))'))
    return _pytest(root, "--sme2-no-baselines")


def worker_wait_fails(root: Path) -> subprocess.CompletedProcess[str]:
    # The wait for the first test's answer fails once; the second test (another model, other run count)
    # asserts that its profile is its own: outcome "1 failed, 1 passed" is the fix, "2 failed" the bug.
    _project(root, """
        import select, types
        import pytest
        from pytest_sme2.targets import host

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
        """)
    (root / "models" / "linear.py").write_text("import torch\ndef get_eager_model():\n    return torch.nn.Linear(8, 4)\n"
                                               "def get_example_inputs():\n    return (torch.ones(2, 8),)\n")
    return _pytest(root, "--sme2-no-baselines")


def sigkill_of_pytest(root: Path) -> subprocess.CompletedProcess[str]:
    # CI's `kill -9 -- -PGID` of a pytest mid-run: exit 0 here means no process it started was left 5 s
    # later (the stdout line lists any that were); the run itself ends with SIGKILL, so it has no outcome.
    sys.path.insert(0, str(REPO / "tests"))
    from helpers_faults import alive, descendants, wait_for

    _project(root, TEST.replace("runner()", "runner(runs=10_000_000, warmup=0)"))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sme2-no-baselines"]
    inner = subprocess.Popen(command, cwd=root, env={**os.environ, "PYTEST_ADDOPTS": ""}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = wait_for(lambda: (d := descendants(inner.pid)) and any("_host_worker" in a for a in d.values()) and d,
                       timeout=600, interval=0.5) or {}
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
    return subprocess.CompletedProcess(command, int(bool(left) or not started),
                                       f"processes left 5 s after SIGKILL: {left or 'none'} (of {len(started)})\n", "")


def threads_huge(root: Path) -> subprocess.CompletedProcess[str]:
    _project(root)
    return _pytest(root, "--sme2-threads=100000")


CASES: list[tuple[str, Callable[[Path], subprocess.CompletedProcess[str]]]] = [
    ("13.2 ids that clean alike (a/b, a_b)", weird_ids),
    ("13.3 baseline with shares: \"abc\"", malformed_baseline),
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
    ("23.3 --sme2-timeout=1e300", timeout_huge),
    ("23.3 runner(timeout=float(\"inf\"))", timeout_infinite_in_test),
    ("23.3 the wait for an answer fails, the next test runs another model", worker_wait_fails),
    ("23.6 SIGKILL to pytest's process group mid-run (host)", sigkill_of_pytest),
    ("23 weak --sme2-threads=100000", threads_huge),
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
    args = parser.parse_args()
    rows = []
    for name, case in CASES:
        with tempfile.TemporaryDirectory(prefix="sme2-fault-") as tmp:
            started = time.monotonic()
            result = case(Path(tmp))
            text = result.stdout + result.stderr
            rows.append({"case": name, "outcome": _outcome(result), "message": _message(result),
                         "traceback": "Traceback (most recent call last)" in text,
                         "seconds": round(time.monotonic() - started, 1),
                         "extra": [line for line in result.stdout.splitlines() if line.startswith("baseline files:")]})
        print(f"{rows[-1]['case']}: {rows[-1]['outcome']}", file=sys.stderr)
    print("| case | outcome | message the user sees | traceback |\n|---|---|---|---|")
    for row in rows:
        extra = f" ({row['extra'][0]})" if row["extra"] else ""
        print(f"| {row['case']} | {row['outcome']}{extra} | `{row['message'].replace('|', '/')}` | "
              f"{'YES' if row['traceback'] else 'no'} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": machine(), "cases": rows}, indent=1))
    if any(row["traceback"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
