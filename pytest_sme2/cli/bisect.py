"""``pytest-sme2 bisect GOOD BAD -- PYTEST_ARGS``: the first commit where the given perf tests fail.

Drives ``git bisect run`` with a step that runs pytest on the checked-out commit: exit 0 is
good, a failing test (the gate: assertions, baseline verdicts) is bad, and a commit that
cannot be tested (collection or usage error, nothing collected, interrupted) is skipped
rather than blamed. A missing baseline is not a failure in a step: an old commit that has no
baseline yet says nothing about that commit, and failing it would make every commit bad.
GOOD and BAD are tested first, so a wrong pair of ends stops the bisect instead of blaming
the commit after GOOD. Each step keeps its session folder, verdict and the reason for it
under the output folder. A step re-exports a model exactly when the program it traces to
changed: the export cache is keyed by the traced program's content (graph, weights, input
values; see export_key.py), so a commit that touches only a module the model imports, or a
weights file it loads, is exported anew, and a commit that touches neither is a cache hit.
Every verdict is the gate's own: on noisy targets its statistics over all runs, never one
lucky run; on the emulated target its exact counts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import UsageError
from pytest_sme2.system import git_ignored
from pytest_sme2.system.regular_files import SESSION_FILE, read_text
from pytest_sme2.system.safe_files import append_lines, write_file

STEPS = "steps.jsonl"
# pytest's exit codes that say nothing about the commit: bisect skips those commits (git's 125).
_UNTESTABLE = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
SKIP = 125
# Before the user's arguments, so that their own later `-o sme2_baseline_missing=...` still wins (pytest keeps the
# last -o of a name). skip rather than warn: the test has passed its assertions by then, and a warning would fail
# it in projects with `filterwarnings = error`; regressions against baselines that do exist still fail.
MISSING_BASELINE_IS_NO_FAILURE = ("-o", "sme2_baseline_missing=skip")
REASON_CHARS = 240  # a node id and the gate's first line (160 cut it at the label)
_SUMMARY = re.compile(r"^=+ (.* in [0-9.]+s\b.*?) =+$", re.M)  # "1 failed, 2 passed in 3.1s", "no tests ran in 1s"
_ERROR = re.compile(r"(error|exception)\b.*:", re.I)  # "error: unrecognized arguments: --x", "E   ImportError: ..."


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
        raise UsageError(
            f"{here} is not inside a git repository; run pytest-sme2 bisect from the repository whose "
            "history holds the change"
        )
    top = Path(found.stdout.strip())
    ends = [(name, commit, _commit_id(top, name, commit)) for name, commit in (("GOOD", good), ("BAD", bad))]
    if _git(top, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise UsageError(f"{top} has uncommitted changes; commit or stash them first: bisect checks out other commits")
    if not pytest_args:
        raise UsageError(
            "no tests to bisect with: pass them after --, e.g. "
            "pytest-sme2 bisect v1.0 main -- perf_tests/test_mobilenet_v3_small.py -m sme2"
        )
    out_dir = git_ignored.output_folder(out_dir.resolve())
    log = out_dir / "bisect.log"
    with _restored_on_signals(top):
        _check_ends(top, ends, out_dir, pytest_args, log)
        start = _git(top, "bisect", "start", ends[1][2], ends[0][2], check=False)
        try:
            if start.returncode != 0:
                raise UsageError(f"`git bisect start {bad} {good}` failed: {start.stderr.strip()[-400:]}")
            done = _run_group(["git", "bisect", "run", *_step_command(out_dir, "bisect", pytest_args)], top)
            _append(log, done.stdout + done.stderr + _git(top, "bisect", "log", check=False).stdout)
        finally:
            _git(top, "bisect", "reset", check=False)
    return _result(top, done, out_dir, log)


class _Stopped(BaseException):
    """SIGTERM, SIGINT or SIGHUP during a bisect: unwinds through every ``finally`` that restores the checkout."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


def _original_checkout(top: Path) -> str:
    """The branch checked out now, or the commit of a detached checkout."""
    branch = _git(top, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip()
    return branch or _git(top, "rev-parse", "HEAD").stdout.strip()


@contextmanager
def _restored_on_signals(top: Path):
    """On SIGTERM/SIGINT/SIGHUP: stop the running step (its whole process group, see _run_group), end any
    bisect (``git bisect reset``), check the original branch or commit out again, then die of the same
    signal, so the caller sees the signal's status and the repository is as it was before the bisect."""
    original = _original_checkout(top)

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(signum)

    try:
        previous = {sig: signal.signal(sig, stop) for sig in _SIGNALS}
    except ValueError:  # not the main thread: no handlers can be set; the finally blocks still restore
        previous = {}
    try:
        yield
    except _Stopped as stopped:
        for sig in _SIGNALS:  # a second signal while restoring must not interrupt the restore
            signal.signal(sig, signal.SIG_IGN)
        _git(top, "bisect", "reset", check=False)
        _git(top, "checkout", "-q", original, check=False)
        signal.signal(stopped.signum, signal.SIG_DFL)
        os.kill(os.getpid(), stopped.signum)
        raise SystemExit(128 + stopped.signum)  # where the signal does not end the process (Windows)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_group(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """subprocess.run in a process group of its own, the whole group ended if we are stopped meanwhile:
    `git bisect run` and the pytest of its step must not go on checking out commits after we restored."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=os.name == "posix",
    )
    try:
        stdout, stderr = process.communicate()
    except BaseException:
        _end_group(process)
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _end_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (getattr(signal, "SIGKILL", signal.SIGTERM), 5.0)):
        try:
            if os.name == "posix":
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _result(top: Path, done: subprocess.CompletedProcess[str], out_dir: Path, log: Path) -> BisectResult:
    """What `git bisect run` found, with the reason the first bad commit failed (its step's first FAILED line)."""
    first = re.search(r"^([0-9a-f]{40}) is the first bad commit", done.stdout, re.M)
    steps = _read_steps(out_dir)
    if first is None:
        why = (done.stdout + done.stderr).strip().splitlines()[-1:]
        middle = [s for s in steps if s.get("role") == "bisect"]
        if middle and all(s["verdict"].startswith("skipped") for s in middle):
            why = [
                f"every commit between GOOD and BAD was untestable; the last pytest said: {middle[-1]['reason']} "
                f"(see {middle[-1]['artifacts']})"
            ]
        return BisectResult(
            None, "", steps, log, f"git bisect did not name one first bad commit (see {log}): " f"{' '.join(why)}"
        )
    subject = _git(top, "log", "-1", "--format=%s", first.group(1)).stdout.strip()
    first_reason = next(
        (f": {s['reason']}" for s in reversed(steps) if s["commit"] == first.group(1) and s.get("reason")), ""
    )
    return BisectResult(
        first.group(1),
        subject,
        steps,
        log,
        f"first bad commit: {first.group(1)[:12]} {subject}{first_reason} ({len(steps)} steps; each step's "
        f"session folder, verdict and reason in {out_dir})",
    )


def _commit_id(top: Path, name: str, commit: str) -> str:
    """The full id of GOOD or BAD, resolved once: a relative name such as HEAD~1 moves with each checkout."""
    found = _git(top, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", check=False)
    if found.returncode != 0:
        raise UsageError(f"{name} {commit!r} is not a commit of {top}; pass a commit id, tag or branch")
    return found.stdout.strip()


def _check_ends(top: Path, ends: list[tuple[str, str, str]], out_dir: Path, pytest_args: list[str], log: Path) -> None:
    """Test GOOD and BAD as steps before bisecting; raise UsageError when GOOD is not good or BAD not bad.

    git bisect trusts both ends: with a failing GOOD every commit is bad and it names the commit after GOOD,
    whatever that commit changed. The original checkout is restored however the steps end.
    """
    original = _git(top, "symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip()
    original = original or _git(top, "rev-parse", "HEAD").stdout.strip()  # a detached checkout
    try:
        for name, commit, commit_id in ends:  # GOOD or BAD, as given, its full id
            expected = name.lower()
            _git(top, "checkout", "-q", "--detach", commit_id)
            before = len(_read_steps(out_dir))
            done = _run_group(_step_command(out_dir, f"{expected} end", pytest_args), top)
            _append(log, done.stdout + done.stderr)
            if len(_read_steps(out_dir)) == before:  # the step itself broke before it could record a verdict
                raise UsageError(f"the step at {name} {commit} recorded no verdict: {done.stderr.strip()[-400:]}")
            end = _read_steps(out_dir)[-1]
            if end["verdict"] != expected:
                raise _wrong_end(name, commit, expected, end)
    finally:
        _git(top, "checkout", "-q", original, check=False)


def _wrong_end(name: str, commit: str, expected: str, end: dict) -> UsageError:
    """The error of an end whose verdict is not the expected one: which commit, its verdict, why, and its log."""
    why = f": {end['reason']}" if end["reason"] else ""
    return UsageError(
        f"{name} {commit} ({end['commit'][:12]} {end['subject']}) is not {expected}: {end['verdict']}"
        f"{why}. Nothing was bisected; pass a {name} commit where these tests "
        f"{'pass' if expected == 'good' else 'fail'}. Its session folder and pytest.log: "
        f"{end['artifacts']}"
    )


def _step_command(out_dir: Path, role: str, pytest_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest_sme2.cli.bisect", str(out_dir), "--role", role, "--", *pytest_args]


def _append(log: Path, text: str) -> None:
    """A step's output at the end of the bisect log (its own lines; never written through a link)."""
    append_lines(log, text.splitlines() or [""], sync=False)


def _read_steps(out_dir: Path) -> list[dict]:
    path = out_dir / STEPS
    return [json.loads(line) for line in read_text(path, SESSION_FILE).splitlines()] if path.exists() else []


def pytest_command(pytest_args: list[str], session_root: Path) -> list[str]:
    """The pytest session of one step: a missing baseline is no failure, unless the user's own -o says so."""
    return [
        sys.executable,
        "-m",
        "pytest",
        *MISSING_BASELINE_IS_NO_FAILURE,
        *pytest_args,
        f"--sme2-artifacts-dir={session_root}",
    ]


def reason(output: str, verdict: str, summary: str) -> str:
    """Why a step was bad or skipped, in one line, so the printed step says it without opening its pytest.log.

    Bad: the first ``FAILED <nodeid> - <message>`` line of pytest's short summary (else its first ERROR line);
    skipped: the last error line (a usage error, a module that cannot be imported); else the summary line.
    """
    if verdict == "good":
        return ""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if verdict == "bad":
        found = (
            [_first_failure(lines)]
            if any(line.startswith("FAILED ") for line in lines)
            else [line for line in lines if re.match(r"ERROR \S", line)][:1]
        )
    else:
        found = [re.sub(r"^E\s+", "", line) for line in lines if _ERROR.search(line)][-1:]
    text = found[0] if found else summary or (lines[-1] if lines else "pytest printed nothing")
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _first_failure(lines: list[str]) -> str:
    """The first FAILED line; a message that is only a heading ("Failed: sme2 baseline check failed:") gets the
    line that follows the heading in the failure's report, the regression or the missing baseline itself."""
    failed = next(line for line in lines if line.startswith("FAILED "))
    heading = failed.split(" - ", 1)[-1]
    if not heading.endswith(":"):
        return failed
    plain = [re.sub(r"^E\s+", "", line) for line in lines]
    after = next((plain[i + 1] for i, line in enumerate(plain[:-1]) if len(line) > 1 and heading.endswith(line)), "")
    # the heading says nothing the line after it does not: "FAILED <id> - <what failed>"
    return f"{failed.split(' - ', 1)[0]} - {after}" if after else failed


def step(out_dir: Path, pytest_args: list[str], role: str = "bisect") -> int:
    """One step on the checked-out commit (``role``: a bisect step, or the good or bad end checked first):
    pytest's verdict as git bisect's exit code."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    subject = subprocess.run(["git", "log", "-1", "--format=%s"], capture_output=True, text=True).stdout.strip()
    number = len(_read_steps(out_dir)) + 1
    session_root = out_dir / f"step-{number:02d}-{commit[:12]}"
    started = time.monotonic()
    # Wide enough that pytest does not cut the FAILED line's message before the reason is taken from it.
    done = subprocess.run(
        pytest_command(pytest_args, session_root), capture_output=True, text=True, env={**os.environ, "COLUMNS": "240"}
    )
    session_root.mkdir(parents=True, exist_ok=True)
    write_file(session_root / "pytest.log", done.stdout + done.stderr)
    if done.returncode == 0:
        verdict, code = "good", 0
    elif done.returncode == 1:
        verdict, code = "bad", 1
    else:
        verdict, code = f"skipped ({_UNTESTABLE.get(done.returncode, f'pytest exit {done.returncode}')})", SKIP
    summary = _SUMMARY.findall(done.stdout)
    why = reason(done.stdout + done.stderr, verdict, summary[-1] if summary else "")
    record = {
        "step": number,
        "role": role,
        "commit": commit,
        "subject": subject,
        "verdict": verdict,
        "reason": why,
        "pytest_exit": done.returncode,
        "pytest_summary": summary[-1] if summary else "",
        "seconds": round(time.monotonic() - started, 1),
        "artifacts": str(session_root),
    }
    append_lines(out_dir / STEPS, [json.dumps(record)])
    print(step_line(record))
    return code


def step_line(record: dict) -> str:
    """``step 3: <commit> <subject>: bad: <reason>``: one step as each step prints it and the CLI lists it."""
    why = record.get("reason")
    return f"step {record['step']}: {record['commit'][:12]} {record['subject']}: {record['verdict']}" + (
        f": {why}" if why else ""
    )


def _main(argv: list[str]) -> int:
    """The step's command line: OUT [--role ROLE] -- PYTEST_ARGS."""
    separator = argv.index("--")
    head = argv[:separator]
    role = head[head.index("--role") + 1] if "--role" in head else "bisect"
    return step(Path(head[0]), argv[separator + 1 :], role)


if __name__ == "__main__":  # git bisect run python -m pytest_sme2.cli.bisect OUT --role bisect -- PYTEST_ARGS
    sys.exit(_main(sys.argv[1:]))
