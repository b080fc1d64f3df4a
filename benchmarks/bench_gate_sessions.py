"""The whole gate as users run it: one project, several tests per session, a baseline recorded once.

bench_whole_gate.py judges records made each in a session of its own. Users instead run many
tests in one pytest session, record the baselines once (with ``--sme2-update-baselines``,
perhaps beside busy jobs) and then run unchanged sessions against them. This script does
exactly that with real pytest sessions on the host target at default settings:

1. a project with one perf test per model (toy_cnn, mobilenet_v3_small, the transformer
   encoder, and ``mynet``: a model split over a package, its layers in ``mynet/blocks.py``);
2. ``pytest --sme2-update-baselines`` once (refused baselines are counted and re-tried once);
3. ``--unchanged`` sessions (or as many as ``--hours`` allows) of the unchanged project: every failed test is a
   false alarm;
4. one session per injected regression (run before the unchanged sessions, so a study cut
   short by ``--hours`` still has them), the change written into the model's own file (into
   ``mynet/blocks.py`` for the package model): ``slow`` (about +15% latency from extra
   layers), ``undelegated`` (torch.where on the output) and ``datamove`` (feature maps padded
   and cut back); every test of that session must fail, on the check that names the change.

Run it beside background jobs with ``../shared/tools/with-load K -- python
benchmarks/bench_gate_sessions.py --load-label K``. Results go to --out as JSON.
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
from bench_whole_gate import _CHANGES, _UNDELEGATED, _WRAPPER

MODELS = ("toy_cnn", "mobilenet_v3_small", "transformer_encoder")
KINDS = ("slow", "undelegated", "datamove")
EXPECTED = {"slow": "latency +", "undelegated": "fell out of the delegate", "datamove": "share of DATA_MOVEMENT"}

BLOCKS = '''"""Layers of mynet (the study's package model)."""
import torch


class Stage(torch.nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
        self.act = torch.nn.ReLU()
{init}

    def forward(self, x):
        y = self.act(self.conv(x))
{forward}
        return y
'''
_BLOCK_CHANGES = {
    "base": ("", ""),
    "slow": ("        self.extra = torch.nn.Conv2d(cout, cout, 3, padding=1)", "        y = y + self.extra(y)"),
    "undelegated": ("", "        y = torch.where(y > 0, y, 0.5 * y)"),
    "datamove": (
        "",
        "        y = torch.nn.functional.pad(y, (1, 1, 1, 1))[:, :, 1:-1, 1:-1]\n"
        "        y = torch.nn.functional.pad(y, (1, 1, 1, 1))[:, :, 1:-1, 1:-1]",
    ),
}
MODEL = '''"""mynet: a small CNN whose layers live in mynet/blocks.py."""
import torch

from .blocks import Stage


def get_eager_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(Stage(3, 16), torch.nn.MaxPool2d(2), Stage(16, 32), Stage(32, 32),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)).eval()


def get_example_inputs():
    torch.manual_seed(1)
    return (torch.randn(1, 3, 64, 64),)
'''
TESTS = """import pytest

MODELS = {models!r}


@pytest.mark.sme2
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.model(name)) for name in MODELS])
def test_model(name, exported_pte, runner, etdump_profile):
    etdump_profile(exported_pte, runner())
"""


def write_project(root: Path, change: str) -> None:
    """The project with every model unchanged (``base``) or carrying one injected change."""
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        base = str(REPO / "models" / f"{model}.py")
        path = models / f"{model}.py"
        if change == "base" or model not in changed_models(change):
            shutil.copyfile(base, path)
            continue
        init, forward = _UNDELEGATED if change == "undelegated" else _CHANGES[model][change]
        path.write_text(
            _WRAPPER.format(model=model, kind=change, base=base, init=init or "        pass", forward=forward)
        )
    package = root / "mynet"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(MODEL)
    init, forward = _BLOCK_CHANGES[change]
    (package / "blocks.py").write_text(BLOCKS.format(init=init or "        pass", forward=forward or "        pass"))
    (root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nsme2_model_dirs = ["models"]\nsme2_models = ["mynet = mynet.model"]\n'
        'pythonpath = ["."]\nsme2_target = "host"\nfilterwarnings = ["ignore"]\n'
    )
    names = [*MODELS, "mynet"]
    (root / "test_perf.py").write_text(TESTS.format(models=names))


def pytest_session(root: Path, *args: str, timeout: float = 3600) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_perf.py", "-p", "no:cacheprovider", "-q", "-rfE", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
    )
    out = done.stdout
    failed = re.findall(r"^FAILED test_perf.py::test_model\[(\w+)\] - (.*)$", out, re.M)
    messages = {}
    for name in [*MODELS, "mynet"]:
        block = re.search(rf"_+ test_model\[{name}\] _+\n(.*?)(?=\n_{{5,}} |\n-+ sme2|\n=+ )", out, re.S)
        if block:
            messages[name] = block.group(1)[-3000:]
    skipped = re.search(r"(\d+) skipped", out)
    passed = re.search(r"(\d+) passed", out)
    ran = len(failed) + int(passed.group(1) if passed else 0) + int(skipped.group(1) if skipped else 0)
    # A session that never ran its tests (an import error, a crash) judged nothing: not a pass.
    return {
        "exit": done.returncode,
        "seconds": time.perf_counter() - started,
        "failed": [n for n, _ in failed],
        "skipped": int(skipped.group(1)) if skipped else 0,
        "ran": ran,
        "invalid": ran < len(MODELS) + 1,
        "messages": messages,
        "tail": out[-1500:],
        "stderr_tail": done.stderr[-1500:],
    }


def invalid(session: dict) -> bool:
    """A session that ran fewer tests than the project has (crashed, could not import): it judged nothing.
    Older result files have no "ran": there, a failing exit with no failed test and no output."""
    if "invalid" in session:
        return bool(session["invalid"])
    return session["exit"] != 0 and not session["failed"] and not session["tail"].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unchanged", type=int, default=6, help="unchanged sessions after the update")
    parser.add_argument(
        "--hours",
        type=float,
        default=24.0,
        help="start no unchanged session after this many hours (results are saved as they come)",
    )
    parser.add_argument("--load-label", default="0")
    parser.add_argument("--work", type=Path, default=Path(".sme2/bench-gate-sessions"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--reuse-baselines",
        action="store_true",
        help="keep the baselines an earlier run of this script wrote in --work (no update): the same "
        "baselines judged by checks of another design, e.g. -o sme2_replicas=1 after 3",
    )
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments for every session (after --)")
    args = parser.parse_args()
    started = time.time()
    root = args.work.resolve()
    if not args.reuse_baselines:
        shutil.rmtree(root / "baselines", ignore_errors=True)
    elif not any((root / "baselines").glob("*/*.json")):
        parser.error(f"--reuse-baselines: no baselines in {root / 'baselines'}")
    result: dict = {
        "machine": machine(),
        "background_jobs": args.load_label,
        "pytest_args": args.pytest_args,
        "reused_baselines": args.reuse_baselines,
        "load_average_at_start": list(os.getloadavg()),
        "update": [],
        "unchanged": [],
        "changed": {},
    }

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    write_project(root, "base")
    for attempt in range(0 if args.reuse_baselines else 2):
        update = pytest_session(root, "--sme2-update-baselines", *args.pytest_args)
        result["update"].append(update)
        save()
        if update["exit"] == 0:
            break
    # A test whose baseline was refused has none: skipped (counted), never a false alarm or a catch.
    checks = ("-o", "sme2_baseline_missing=skip", *args.pytest_args)
    # The injected changes first, so a long study cut short by --hours still has them.
    for kind in KINDS:
        write_project(root, kind)
        session = pytest_session(root, *checks)
        session["caught_on_expected_check"] = [
            name for name in session["failed"] if EXPECTED[kind] in session["messages"].get(name, "")
        ]
        result["changed"][kind] = session
        save()
    write_project(root, "base")
    deadline = started + args.hours * 3600
    while len(result["unchanged"]) < args.unchanged and time.time() < deadline:
        result["unchanged"].append(pytest_session(root, *checks))
        save()
    write_project(root, "base")
    result["load_average_at_end"] = list(os.getloadavg())
    save()
    tests = len(MODELS) + 1
    valid = [s for s in result["unchanged"] if not invalid(s)]
    false = sum(len(s["failed"]) for s in valid)
    print(
        f"false alarms: {false} of {tests * len(valid)} tests in {len(valid)} sessions "
        f"({len(result['unchanged']) - len(valid)} invalid sessions left out: they ran no test)"
    )
    for kind, session in result["changed"].items():
        changed = [*changed_models(kind), "mynet"]
        unchanged_failed = [name for name in session["failed"] if name not in changed]
        print(
            f"{kind}: {len(session['caught_on_expected_check'])} of {len(changed)} changed tests caught on the "
            f"expected check ({len(session['failed'])} failed; unchanged tests failed: {unchanged_failed or 'none'})"
        )


def changed_models(kind: str) -> list[str]:
    """The bundled models an injected change is written into (the transformer has no datamove change)."""
    return [model for model in MODELS if kind != "datamove" or kind in _CHANGES[model]]


if __name__ == "__main__":
    main()
