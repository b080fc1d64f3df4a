"""The built wheel, installed the way a user installs it, runs a perf test in a project outside the checkout.

Why: every other check runs the checkout (installed editable, or on ``PYTHONPATH``), where every file is there.
A user gets the wheel, so a file the wheel leaves out (the runner's C++ sources and CMakeLists, a device file,
anything read at run time beside the code) fails only for them. This builds the wheel from a copy, checks it
holds every file of the package, installs it with torch and executorch in a fresh venv in a temp folder, and
in a temp project that venv's own commands do what the README tells a user to do: ``pytest-sme2
setup-emulation`` (it re-uses ``~/.cache/pytest-sme2``, or builds there), ``pytest-sme2 init`` of a tiny model,
then the two commands init prints. It passes when the second session judged a counted profile against the
baseline the first one wrote, every verdict ok. About two minutes here, most of it pip.

    python .ci/wheel_smoke.py                    # build the wheel of this checkout and try it
    python .ci/wheel_smoke.py --wheel dist/X.whl # try a wheel of this checkout built another way (python -m build)
    TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu python .ci/wheel_smoke.py   # torch's CPU build
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from built_wheel import ROOT, build_wheel, scratch_folder

TORCH = "torch==2.13.0"
EXECUTORCH = "executorch==1.5.1"
MODEL = """\
import torch


def get_eager_model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(8 * 14 * 14, 10)).eval()


def get_example_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
"""
# What the checkout has that the wheel need not hold.
NOT_SHIPPED = ("__pycache__",)


class SmokeFailure(Exception):
    """A step that did not do what a user needs; the message says which and what it printed."""


def missing_from_wheel(wheel: Path, package: Path) -> list[str]:
    """Files of ``package`` (the checkout's pytest_sme2/) that the wheel does not hold, as package paths."""
    with zipfile.ZipFile(wheel) as z:
        shipped = set(z.namelist())
    present = {
        path.relative_to(package.parent).as_posix()
        for path in package.rglob("*")
        if path.is_file() and not any(part in NOT_SHIPPED for part in path.parts)
    }
    return sorted(present - shipped)


def session_problems(summary: dict[str, Any], tests: int = 1) -> list[str]:
    """What a gated session of ``tests`` perf tests lacks: each test passed, with counted profiles and verdicts
    that are all ok (.ci/version_matrix.py asks for two)."""
    held = summary.get("tests") or []
    if len(held) != tests:
        return [f"the session holds {len(held)} tests with profiles, not the {tests} perf test{'s' * (tests != 1)}"]
    return [problem for test in held for problem in _test_problems(test)]


def _test_problems(test: dict[str, Any]) -> list[str]:
    problems = [] if test.get("outcome") == "passed" else [f"{test.get('nodeid')} {test.get('outcome')}"]
    profiles = test.get("profiles") or []
    if not profiles:
        problems.append("no profile")
    for profile in profiles:
        counted = (profile.get("instructions") or {}).get("per_inference")
        if not profile.get("emulated") or not counted:
            problems.append(f"profile {profile.get('variant')!r} was not counted on the emulated target")
    verdicts = test.get("verdicts") or []
    if not verdicts:
        problems.append("no baseline verdict: the gate did not judge the test")
    problems += [f"verdict {v.get('verdict')}: {v.get('message')}" for v in verdicts if v.get("verdict") != "ok"]
    return problems


def _run(command: list[str], cwd: Path, env: dict[str, str], what: str) -> str:
    """Run one step; its stdout, or SmokeFailure with the step, its exit code and the end of its output."""
    started = time.monotonic()
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"  {time.monotonic() - started:5.1f} s  {what}: {shlex.join(command)}", flush=True)
    if out.returncode != 0:
        raise SmokeFailure(
            f"{what} exited {out.returncode}: {shlex.join(command)}\n" f"{out.stdout[-4000:]}{out.stderr[-4000:]}"
        )
    return out.stdout


def _user_env(venv: Path) -> dict[str, str]:
    """The environment of a user who activated the venv: nothing of this checkout or of an outer pytest."""
    dropped = (
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "PYTEST_ADDOPTS",
        "PYTEST_PLUGINS",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
        # Set in some workplaces' sessions (this one's): with pip's --no-compile below, every process of the smoke
        # would then compile torch's and executorch's modules from source again (about 8 s of CPU each). A user's
        # venv has them compiled once; here the first process that imports them writes them.
        "PYTHONDONTWRITEBYTECODE",
    )
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def fresh_venv(venv: Path, wheel: Path, torch: str, executorch: str) -> tuple[Path, dict[str, str]]:
    """A new venv at ``venv`` with ``torch`` first (from TORCH_INDEX_URL when set: the CPU build), then the wheel
    and ``executorch`` (requirement strings); its bin folder and the user environment to run it in."""
    bin_, env = venv / "bin", _user_env(venv)
    torch_index = os.environ.get("TORCH_INDEX_URL")
    pip = [str(bin_ / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
    _run([sys.executable, "-m", "venv", str(venv)], venv.parent, env, "fresh venv")
    _run([*pip, *(["--index-url", torch_index] if torch_index else []), torch], venv.parent, env, "torch")
    _run([*pip, str(wheel), executorch], venv.parent, env, "the wheel and executorch")
    return bin_, env


def smoke(work: Path, wheel: Path | None) -> None:
    """Every step in ``work``; SmokeFailure at the first that fails."""
    wheel = wheel or build_wheel(work)
    missing = missing_from_wheel(wheel, ROOT / "pytest_sme2")
    if missing:
        raise SmokeFailure(
            f"{wheel.name} lacks {', '.join(missing)} of this checkout: list them in "
            "[tool.setuptools.package-data] of pyproject.toml"
        )
    print(f"  wheel {wheel.name} holds every file of this checkout's pytest_sme2/", flush=True)
    venv, project = work / "venv", work / "project"
    bin_, env = fresh_venv(venv, wheel, TORCH, EXECUTORCH)
    (project / "models").mkdir(parents=True)
    (project / "models" / "smoke_net.py").write_text(MODEL)
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    where = _run(
        [str(bin_ / "python"), "-c", "import pytest_sme2; print(pytest_sme2.__file__)"], project, env, "import"
    )
    if not Path(where.strip()).is_relative_to(venv):
        raise SmokeFailure(f"pytest_sme2 was imported from {where.strip()}, not from the venv's installed wheel")
    _run([str(bin_ / "pytest-sme2"), "setup-emulation"], project, env, "emulated target")
    printed = _run([str(bin_ / "pytest-sme2"), "init", "models/smoke_net.py"], project, env, "init")
    commands = [shlex.split(line) for line in printed.splitlines() if line.startswith("  pytest ")]
    if len(commands) != 2:
        raise SmokeFailure(f"pytest-sme2 init printed {len(commands)} pytest commands, not 2:\n{printed}")
    for words in commands:
        _run([str(bin_ / "pytest"), *words[1:], "-p", "no:cacheprovider"], project, env, "perf test")
    if not list((project / "baselines").rglob("*.json")):
        raise SmokeFailure(f"--sme2-update-baselines wrote no baseline under {project / 'baselines'}")
    check_newest_session(project)


def check_newest_session(project: Path, tests: int = 1) -> None:
    """SmokeFailure naming the newest session's summary of ``project`` and its problems (session_problems)."""
    newest = sorted((project / ".sme2" / "artifacts").glob("session-*/summary.json"))[-1]
    problems = session_problems(json.loads(newest.read_text()), tests=tests)
    if problems:
        raise SmokeFailure(f"{newest}: " + "; ".join(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="try this wheel of the checkout instead of building one")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (venv, project) and say where")
    args = parser.parse_args(argv)
    if args.wheel is not None and not args.wheel.is_file():
        parser.error(f"--wheel {args.wheel}: no such file; build one with `pip wheel --no-deps .`")
    started = time.monotonic()
    with scratch_folder("wheel-smoke-", args.keep, "wheel_smoke") as tmp:
        try:
            smoke(tmp, args.wheel and args.wheel.resolve())
        except SmokeFailure as exc:
            print(f"wheel_smoke: FAILED in {time.monotonic() - started:.0f} s: {exc}")
            return 1
    print(
        f"wheel_smoke: the installed wheel recorded and then gated a counted perf test outside the checkout "
        f"({time.monotonic() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
