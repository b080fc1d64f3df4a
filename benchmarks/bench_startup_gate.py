"""Load, init and peak memory on the local target, as users run the gate: a baseline recorded once, then sessions.

Issue 28 item 2 asks that hardware load and init be gated like latency. One load per runner process, judged
against the reference program's inference, failed unchanged mobilenet_v3_small beside two busy jobs (+54%,
p=2e-5). The runner now loads the method native_runner.STARTUP_REPEATS times, each after a timed load of the
reference program, and the gate judges the median of each process's warm loads relative to those. This script
checks that as users run it:

1. a project with toy_cnn, mobilenet_v3_small and ``packed`` (a CNN whose linear head's weight, which XNNPACK
   packs in Method::init, grows with SIZE squared) on the local target;
2. ``pytest --sme2-update-baselines`` once (10 processes, the default), idle;
3. ``--sessions`` unchanged sessions, alternately idle and beside ``../shared/tools/with-load 2``: every
   load, init or peak_rss verdict that fails is a false alarm (other checks are counted apart);
4. one changed session each idle and busy: ``packed`` with twice the head's weight must fail on init.

Results (every load/init/peak_rss verdict line of every session) go to --out as JSON, saved as they come.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, machine

WITH_LOAD = REPO.parent / "shared" / "tools" / "with-load"
STARTUP_CHECKS = ("load", "init", "peak")
PACKED = '''"""A CNN whose linear head's weight (packed by XNNPACK in Method::init) grows with SIZE squared."""
import torch

SIZE = {size}


def get_eager_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * SIZE * SIZE, 128)).eval()


def get_example_inputs():
    return (torch.ones(1, 4, SIZE, SIZE),)
'''
TESTS = """import pytest


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.model(n))
                                  for n in ("toy_cnn", "mobilenet_v3_small", "packed")])
def test_model(name, exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def write_project(root: Path, size: int) -> None:
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    for model in ("toy_cnn", "mobilenet_v3_small"):
        shutil.copyfile(REPO / "models" / f"{model}.py", models / f"{model}.py")
    (models / "packed.py").write_text(PACKED.format(size=size))
    (root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsme2_model_dirs = ["models"]\n'
        'sme2_target = "local"\nfilterwarnings = ["ignore"]\n'
    )
    (root / "test_startup.py").write_text(TESTS)


def session(root: Path, busy: bool, *args: str) -> dict:
    """One pytest session; its start-up verdicts by test and check, read from the baseline-verdicts files."""
    artifacts = root / "art"
    shutil.rmtree(artifacts, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "test_startup.py",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--sme2-artifacts-dir={artifacts}",
        *args,
    ]
    if busy:
        command = [sys.executable, str(WITH_LOAD), "2", "--", *command]
    started = time.perf_counter()
    done = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTEST_ADDOPTS": ""}
    )
    verdicts: dict[str, dict[str, str]] = {}
    regressions: list[str] = []  # every failing verdict, start-up or not
    for listed in artifacts.rglob("baseline-verdicts~*.txt"):
        test = re.search(r"test_model.(toy_cnn|mobilenet_v3_small|packed)", str(listed))
        lines = listed.read_text(encoding="utf-8").split("every verdict", 1)[1].splitlines()[1:]
        for line in (line.strip() for line in lines if "]: " in line):
            if line.startswith("[regression]"):
                regressions.append(line[:400])
            check = line.split("]: ", 1)[1].split(" ", 1)[0]
            if check in STARTUP_CHECKS:
                verdicts.setdefault(test.group(1) if test else listed.parent.name, {})[check] = line
    failed = re.findall(r"^FAILED test_startup.py::test_model\[(\w+)\]", done.stdout, re.M)
    return {
        "busy": busy,
        "exit": done.returncode,
        "seconds": round(time.perf_counter() - started, 1),
        "failed": failed,
        "regressions": regressions,
        "verdicts": verdicts,
        "tail": done.stdout[-1200:],
    }


def false_alarms(entry: dict) -> list[str]:
    return [
        line for checks in entry["verdicts"].values() for line in checks.values() if line.startswith("[regression]")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10, help="unchanged sessions, alternately idle and busy")
    parser.add_argument("--minutes", type=float, default=40.0, help="start no session after this many minutes")
    parser.add_argument("--work", type=Path, default=Path(".sme2/bench-startup-gate"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.time()
    root = args.work.resolve()
    shutil.rmtree(root / "baselines", ignore_errors=True)
    result: dict = {
        "machine": machine(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "update": None,
        "changed": [],
        "unchanged": [],
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    write_project(root, 24)
    result["update"] = session(root, False, "--sme2-update-baselines", "--sme2-accept-noisy-baselines")
    save()
    checks = ("-o", "sme2_baseline_missing=skip")
    write_project(root, 34)  # the head's weight twice as big
    for busy in (False, True):
        entry = session(root, busy, *checks)
        entry["init_caught"] = entry["verdicts"].get("packed", {}).get("init", "").startswith("[regression]")
        result["changed"].append(entry)
        save()
    write_project(root, 24)
    while len(result["unchanged"]) < args.sessions and time.time() < started + args.minutes * 60:
        entry = session(root, len(result["unchanged"]) % 2 == 1, *checks)
        entry["startup_false_alarms"] = false_alarms(entry)
        result["unchanged"].append(entry)
        save()
    result["ended"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    save()
    alarms = sum(len(e["startup_false_alarms"]) for e in result["unchanged"])
    print(
        f"unchanged sessions: {len(result['unchanged'])}, start-up false alarms: {alarms}; changed init caught: "
        f"{[e['init_caught'] for e in result['changed']]}"
    )


if __name__ == "__main__":
    main()
