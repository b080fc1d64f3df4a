"""``pytest-sme2 bisect GOOD BAD -- PYTEST_ARGS``: the first commit where the given perf tests fail.

Drives ``git bisect run`` with a step that runs pytest on the checked-out commit: exit 0 is
good, a failing test (the gate: assertions, baseline verdicts) is bad, and a commit that
cannot be tested (collection or usage error, nothing collected, interrupted) is skipped
rather than blamed. Each step keeps its session folder and verdict under the output
folder. The models are exported again wherever their source changed (the export cache is
keyed by source), and every verdict is the gate's own: on noisy targets its statistics over
all runs, never one lucky run; on the emulated target its exact counts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

STEPS = "steps.jsonl"
# pytest's exit codes that say nothing about the commit: bisect skips those commits (git's 125).
_UNTESTABLE = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
SKIP = 125


@dataclass(frozen=True)
class BisectResult:
    first_bad: str | None  # full commit id, None when git could not decide (skipped commits)
    subject: str
    steps: list[dict]
    log: Path
    message: str


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise UsageError(f"`git {' '.join(args)}` failed in {repo}: {done.stderr.strip()[-400:]}")
    return done


def run(good: str, bad: str, pytest_args: list[str], out_dir: Path, repo: Path | None = None) -> BisectResult:
    """Bisect ``repo`` (default: the git repository around the current folder) between two commits."""
    here = Path(repo or Path.cwd())
    found = _git(here, "rev-parse", "--show-toplevel", check=False)
    if found.returncode != 0:
        raise UsageError(f"{here} is not inside a git repository; run pytest-sme2 bisect from the repository whose "
                         "history holds the change")
    top = Path(found.stdout.strip())
    for name, commit in (("GOOD", good), ("BAD", bad)):
        if _git(top, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", check=False).returncode != 0:
            raise UsageError(f"{name} {commit!r} is not a commit of {top}; pass a commit id, tag or branch")
    if _git(top, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise UsageError(f"{top} has uncommitted changes; commit or stash them first: bisect checks out other commits")
    if not pytest_args:
        raise UsageError("no tests to bisect with: pass them after --, e.g. "
                         "pytest-sme2 bisect v1.0 main -- perf_tests/test_mobilenet_v3_small.py -m sme2")
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    step = [sys.executable, "-m", "pytest_sme2.bisect", str(out_dir), "--", *pytest_args]
    start = _git(top, "bisect", "start", bad, good, check=False)
    try:
        if start.returncode != 0:
            raise UsageError(f"`git bisect start {bad} {good}` failed: {start.stderr.strip()[-400:]}")
        done = subprocess.run(["git", "bisect", "run", *step], cwd=top, capture_output=True, text=True)
        log = out_dir / "bisect.log"
        log.write_text(done.stdout + done.stderr + _git(top, "bisect", "log", check=False).stdout, encoding="utf-8")
    finally:
        _git(top, "bisect", "reset", check=False)
    first = re.search(r"^([0-9a-f]{40}) is the first bad commit", done.stdout, re.M)
    steps = [json.loads(line) for line in (out_dir / STEPS).read_text().splitlines()] if (out_dir / STEPS).exists() else []
    if first is None:
        why = (done.stdout + done.stderr).strip().splitlines()[-1:]
        if steps and all(s["verdict"].startswith("skipped") for s in steps):  # e.g. a wrong pytest argument
            last = Path(steps[-1]["artifacts"], "pytest.log").read_text(errors="replace").strip().splitlines()[-3:]
            why = [f"every step was untestable; the last pytest said: {' / '.join(last)}"]
        return BisectResult(None, "", steps, log, f"git bisect did not name one first bad commit (see {log}): "
                                                  f"{' '.join(why)}")
    subject = _git(top, "log", "-1", "--format=%s", first.group(1)).stdout.strip()
    return BisectResult(first.group(1), subject, steps, log,
                        f"first bad commit: {first.group(1)[:12]} {subject} ({len(steps)} steps; each step's session "
                        f"folder and verdict in {out_dir})")


def step(out_dir: Path, pytest_args: list[str]) -> int:
    """One bisect step on the checked-out commit: pytest's verdict as git bisect's exit code."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subject = subprocess.run(["git", "log", "-1", "--format=%s"], capture_output=True, text=True).stdout.strip()
    number = len((out_dir / STEPS).read_text().splitlines()) + 1 if (out_dir / STEPS).exists() else 1
    session_root = out_dir / f"step-{number:02d}-{commit[:12]}"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *pytest_args, f"--sme2-artifacts-dir={session_root}"],
                          capture_output=True, text=True)
    session_root.mkdir(parents=True, exist_ok=True)
    (session_root / "pytest.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode == 0:
        verdict, code = "good", 0
    elif done.returncode == 1:
        verdict, code = "bad", 1
    else:
        verdict, code = f"skipped ({_UNTESTABLE.get(done.returncode, f'pytest exit {done.returncode}')})", SKIP
    summary = re.findall(r"^=+ (.*(?:passed|failed|error|skipped|no tests ran).*) =+$", done.stdout, re.M)
    with open(out_dir / STEPS, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"step": number, "commit": commit, "subject": subject, "verdict": verdict,
                                 "pytest_exit": done.returncode, "pytest_summary": summary[-1] if summary else "",
                                 "seconds": round(time.monotonic() - started, 1),
                                 "artifacts": str(session_root)}) + "\n")
    print(f"step {number}: {commit[:12]} {subject}: {verdict}")
    return code


if __name__ == "__main__":  # git bisect run python -m pytest_sme2.bisect OUT -- PYTEST_ARGS
    separator = sys.argv.index("--")
    sys.exit(step(Path(sys.argv[1]), sys.argv[separator + 1:]))
