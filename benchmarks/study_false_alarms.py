"""The gate's false-alarm rate as users run it, bounded per condition by replaying recorded sessions.

A user records baselines once (``pytest --sme2-update-baselines``, defaults) and then runs unchanged
sessions of several tests against them; every failed test of an unchanged session is a false alarm.
Bounding that rate at 1% with 95% confidence and no alarm needs 299 judged unchanged test pairs
(1 - 0.05 ** (1 / n) <= 0.01). Running 299 baseline-then-check sessions one after the other takes days
here, so this study replays instead:

1. per target and condition, K baseline folders, each recorded by a real pytest session with
   ``--sme2-update-baselines`` at defaults into a folder of its own (``--sme2-baselines-dir``); a
   refused baseline is counted and reported, never forced with ``--sme2-accept-noisy-baselines``;
2. M plain unchanged pytest sessions, each leaving ``.sme2/artifacts/session-*/summary.json``;
3. every session judged against every baseline folder recorded before it, with the real
   ``pytest-sme2 check SESSION --baselines FOLDER --out ...``: K x M x tests pairs.

Dependence: each baseline is reused by M sessions and each session by K baselines, so the pairs are not
independent; the summary gives the bound for the pair count and for the count of independent sessions.

The sessions measure, per test, as many processes as the most any of the K baselines asks for
(``sme2_replicas = auto`` reads it from a folder holding, per test, the baseline file that asks for the
most): a pair's check then has at least the processes its baseline would have made a user's session
measure, which can only make a shift between sessions easier to call significant.

Conditions: ``idle`` (a session starts only when the 1-minute load average is at most 0.5; the study
waits, and says so, otherwise), ``load1`` and ``load2`` (each pytest session runs under
``/work/shared/tools/with-load 1|2``). Every line records the load average and the number of other busy
processes at the session's start and end: the machine is shared.

Every recorded session and every judged pair is APPENDED as one JSON line to --results (one committed
file for all targets and conditions), so a study can go on across sittings until the counts are reached:

    python benchmarks/study_false_alarms.py run --condition load1 --baselines 5 --sessions 20
    python benchmarks/study_false_alarms.py run --condition idle --local --hours 2
    python benchmarks/study_false_alarms.py summary
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, machine  # noqa: E402
from bench_gate_sessions import MODELS, write_project  # noqa: E402

from pytest_sme2.gate.record import upgraded  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "false_alarms.jsonl"
WITH_LOAD = Path("/work/shared/tools/with-load")
CONDITIONS = {"idle": 0, "load1": 1, "load2": 2}
IDLE_LOAD = 0.5  # a session is idle only if the 1-minute load average was at most this at its start
TARGET_PAIRS = 299  # 1 - 0.05 ** (1 / 299) < 0.01
BUSY_SHARE = 0.25  # a process using at least a quarter of a core over the sample counts as busy
TEST_RE = re.compile(r"test_model\[(\w+)\]")
TESTS = (*MODELS, "mynet")  # the project's tests (bench_gate_sessions.write_project)


# ---------------------------------------------------------------- the machine's state


def _proc_times() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, user + system clock ticks) of every process readable now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()  # after "(comm)": state, ppid, ...
        found[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return found


def machine_state(window: float = 1.0) -> dict[str, Any]:
    """The 1/5/15-minute load averages and how many processes outside this study's own process tree used
    at least BUSY_SHARE of a core over ``window`` seconds (the other engineers' jobs on a shared machine)."""
    before = _proc_times()
    time.sleep(window)
    after = _proc_times()
    ours = {os.getpid()}
    grew = True
    while grew:  # this process's descendants: with-load's loaders, pytest's workers
        grown = {pid for pid, (parent, _) in after.items() if parent in ours} | ours
        grew, ours = grown != ours, grown
    ticks = os.sysconf("SC_CLK_TCK") * window
    busy = [
        pid
        for pid, (_, used) in after.items()
        if pid not in ours and pid in before and (used - before[pid][1]) / ticks >= BUSY_SHARE
    ]
    load = Path("/proc/loadavg").read_text().split()
    return {
        "loadavg": [float(v) for v in load[:3]],
        "runnable": load[3],
        "other_busy_processes": len(busy),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ---------------------------------------------------------------- results file


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the results file (none if it does not exist); a broken line is an error naming it."""
    if not path.exists():
        return []
    lines = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.strip():
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path}:{number} is not a JSON line ({error}); fix or remove that line") from None
    return lines


def append(path: Path, line: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")


def upper_bound(failures: int, n: int) -> float:
    """One-sided 95% upper bound of a rate from ``failures`` in ``n`` (exact binomial; 3/n-like at 0)."""
    if n == 0:
        return 1.0
    if failures == 0:
        return 1 - 0.05 ** (1 / n)
    low, high = failures / n, 1.0
    for _ in range(60):  # the p at which seeing <= failures has probability 0.05
        mid = (low + high) / 2
        tail = sum(math.comb(n, k) * mid**k * (1 - mid) ** (n - k) for k in range(failures + 1))
        low, high = (mid, high) if tail > 0.05 else (low, mid)
    return high


# ---------------------------------------------------------------- sessions


def _version(revision: str) -> str:
    """``git rev-parse --short REVISION``, with "+dirty" when pytest_sme2/ differs from it in the working tree."""
    done = subprocess.run(["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "pytest_sme2"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _commit() -> str:
    return _version("HEAD")


def _gate_code() -> str:
    """What judges a pair: the git tree of pytest_sme2/ (a commit of docs alone does not change it)."""
    return "tree " + _version("HEAD:pytest_sme2")


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTEST_ADDOPTS": "",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    }


def pytest_session(root: Path, condition: str, args: list[str], timeout: float) -> dict[str, Any]:
    """One real pytest session of the project in ``root`` (under with-load for a load condition)."""
    command = [sys.executable, "-m", "pytest", "test_perf.py", "-p", "no:cacheprovider", "-q", "-rfE", *args]
    if CONDITIONS[condition]:
        command = [
            sys.executable,
            str(WITH_LOAD),
            str(CONDITIONS[condition]),
            "--seconds",
            str(int(timeout) + 60),
            "--",
            *command,
        ]
    before = set((root / ".sme2" / "artifacts").glob("session-*"))
    start = machine_state()
    started = time.time()
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout, env=_env())
        exit_code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        exit_code, out = (
            "timeout",
            (expired.stdout or b"").decode(errors="replace")
            if isinstance(expired.stdout, bytes)
            else (expired.stdout or ""),
        )
        err = f"timed out after {timeout:.0f} s"
    seconds = time.time() - started
    end = machine_state()
    new = sorted(set((root / ".sme2" / "artifacts").glob("session-*")) - before)
    passed = re.search(r"(\d+) passed", out)
    failed = sorted(set(TEST_RE.findall("\n".join(re.findall(r"^FAILED .*$", out, re.M)))))
    skipped = re.search(r"(\d+) skipped", out)
    ran = len(failed) + int(passed.group(1) if passed else 0) + int(skipped.group(1) if skipped else 0)
    return {
        "condition": condition,
        "start": start,
        "end": end,
        "seconds": round(seconds, 1),
        "exit": exit_code,
        "session_dir": str(new[-1].relative_to(root)) if new else None,
        "failed": failed,
        "skipped": int(skipped.group(1)) if skipped else 0,
        "ran": ran,
        "tail": out[-1500:],
        "stderr_tail": err[-800:],
        "_out": out,
    }


def baseline_files(folder: Path) -> dict[str, Path]:
    """Test name (the model) -> its baseline file in one baselines folder."""
    found = {}
    for path in folder.rglob("*.json"):
        try:
            test = json.loads(path.read_text()).get("test", "")
        except (OSError, json.JSONDecodeError):
            continue
        match = TEST_RE.search(test)
        if match:
            found[match.group(1)] = path
    return found


def asked_replicas(path: Path) -> int:
    """The processes a check against this baseline file measures (sme2_replicas = auto): the most any of
    its records keeps in ``quality.check_replicas``."""
    data = json.loads(path.read_text())
    profiles = [upgraded(r, data.get("schema", 1)) for r in (data.get("profiles") or {}).values()]
    return max((int((r.get("quality") or {}).get("check_replicas") or 1) for r in profiles), default=1)


def build_union(root: Path, folders: list[Path]) -> dict[str, int]:
    """``root/baselines-union``: per test the baseline file that asks its checks for the most processes, so a
    session run against it measures at least what each of the K baselines would have had it measure."""
    union = root / "baselines-union"
    shutil.rmtree(union, ignore_errors=True)
    asked: dict[str, int] = {}
    for folder in folders:
        for test, path in baseline_files(folder).items():
            count = asked_replicas(path)
            if count > asked.get(test, 0):
                asked[test] = count
                target = union / path.relative_to(folder)
                for old in union.rglob("*.json"):
                    if TEST_RE.search(json.loads(old.read_text()).get("test", "")).group(1) == test:
                        old.unlink()
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    return asked


def refusals(out: str) -> dict[str, str]:
    """Test -> the first lines of its refusal, from an update session's output."""
    found = {}
    for block in re.split(r"\n_{5,} ", out):
        match = TEST_RE.match(block.strip("_ ")) or TEST_RE.search(block[:200])
        if match and "baseline not written" in block:
            text = block[block.index("baseline not written") :].split("\nways out:")[0]
            found[match.group(1)] = "\n".join(text.splitlines()[:8])[:2000]
    return found


# ---------------------------------------------------------------- judging


def judge(root: Path, baseline: Path, session: Path, out: Path) -> dict[str, dict[str, Any]]:
    """``pytest-sme2 check SESSION --baselines FOLDER --out OUT`` (the real command): test -> its verdict."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_sme2.cli",
            "check",
            str(session),
            "--baselines",
            str(baseline),
            "--missing",
            "skip",
            "--out",
            str(out),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    found = parse_check(done.stdout, out)
    if not found:
        found["(none)"] = {
            "verdict": "error",
            "exit": done.returncode,
            "stdout": done.stdout[-1500:],
            "stderr": done.stderr[-1500:],
        }
    return found


def parse_check(text: str, out: Path | None = None) -> dict[str, dict[str, Any]]:
    """Test -> its verdict from the output of ``pytest-sme2 check``: ``passed`` (with its inconclusive
    count), ``missing`` (no baseline for it in that folder: not a judged pair) or ``failed`` (the message:
    which check, its numbers and what the verdict said)."""
    found: dict[str, dict[str, Any]] = {}
    for match in re.finditer(r"^passed (\S+) \((.*)\)$", text, re.M):
        test = TEST_RE.search(match.group(1))
        if test:
            shown = match.group(2)
            verdict = "missing" if "no baseline" in shown else "passed"
            inconclusive = re.search(r"(\d+) inconclusive", shown)
            found[test.group(1)] = {
                "verdict": verdict,
                "shown": shown[:400],
                "inconclusive": int(inconclusive.group(1)) if inconclusive else 0,
            }
    for match in re.finditer(r"^FAILED (\S+)\n(.*?)(?=^FAILED |^passed |^\d+ of \d+ test)", text, re.M | re.S):
        test = TEST_RE.search(match.group(1))
        if test:
            found[test.group(1)] = {
                "verdict": "failed",
                "message": match.group(2).strip()[:4000],
                "verdicts_dir": str(out) if out else None,
            }
    return found


# ---------------------------------------------------------------- the study


def _key(target: str, condition: str) -> tuple[str, str]:
    return target, condition


def _may_start(condition: str, max_other_busy: int | None, deadline: float, log, waited: dict[str, Any]) -> bool:
    """True when a session may start: for idle, once the 1-minute load average is at most IDLE_LOAD; with
    ``max_other_busy``, once at most that many other processes are busy (so a load condition is not four
    busy jobs in truth); at once otherwise. It waits, saying why every 5 minutes, and fills ``waited``
    (seconds, the reasons and the busiest readings) for the results file; False if the deadline passes."""
    said, started = 0.0, time.time()
    while time.time() < deadline:
        state = machine_state()
        load, busy = state["loadavg"][0], state["other_busy_processes"]
        reasons = []
        if condition == "idle" and load > IDLE_LOAD:
            reasons.append(f"1-minute load average {load:.2f} > {IDLE_LOAD}")
        if max_other_busy is not None and busy > max_other_busy:
            reasons.append(f"{busy} other busy processes > {max_other_busy}")
        if not reasons:
            waited["seconds"] = round(time.time() - started)
            return True
        waited.update(
            seconds=round(time.time() - started),
            why=reasons,
            max_load=max(load, waited.get("max_load", 0)),
            max_busy=max(busy, waited.get("max_busy", 0)),
            min_load=min(load, waited.get("min_load", load)),
        )
        if time.time() - said > 300:
            log(
                f"waiting: {'; '.join(reasons)} (load average {load:.2f}, {busy} other busy processes); "
                f"no {condition} session starts before"
            )
            said = time.time()
        time.sleep(30)
    return False


def _start(args: argparse.Namespace, deadline: float, log, results: Path, common: dict[str, Any]) -> bool:
    """Wait as _may_start says; a wait of a minute or more is appended to the results file as a ``waited``
    line (the time the shared machine cost the study, and why)."""
    waited: dict[str, Any] = {}
    ready = _may_start(args.condition, args.max_other_busy, deadline, log, waited)
    if waited.get("seconds", 0) >= 60:
        append(
            results,
            {
                **common,
                "kind": "waited",
                **waited,
                "started_after": ready,
                "max_other_busy": args.max_other_busy,
                "end": machine_state(),
            },
        )
    return ready


def run(args: argparse.Namespace) -> None:
    target = "local" if args.local else "host"
    root = (args.work or REPO / ".sme2" / "false-alarms" / f"{target}-{args.condition}").resolve()
    results = args.results.resolve()
    deadline = time.time() + args.hours * 3600
    target_args = ["--sme2-target=local"] if args.local else []
    common = {
        "target": target,
        "condition": args.condition,
        "work": str(root),
        "machine": machine(),
        "commit": _commit(),
    }

    def log(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {target}/{args.condition}: {text}", flush=True)

    write_project(root, "base")
    mine = [line for line in read_lines(results) if line.get("work") == str(root)]
    baselines = [line for line in mine if line["kind"] == "baseline"]  # refused ones count as attempts
    sessions = [
        line
        for line in mine
        if line["kind"] == "session" and line.get("session_dir") and (root / line["session_dir"]).is_dir()
    ]

    def usable() -> list[dict[str, Any]]:
        """The baseline folders of this project that hold a written baseline (still on disk)."""
        return [line for line in baselines if line["written"] and (root / line["folder"]).is_dir()]

    attempts = args.baseline_attempts or 2 * args.baselines
    while len(usable()) < args.baselines and len(baselines) < attempts and time.time() < deadline:
        if not _start(args, deadline, log, results, common):
            break
        folder = f"baselines-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        log(
            f"recording a baseline folder ({len(usable())} of {args.baselines} written so far, attempt "
            f"{len(baselines) + 1} of at most {attempts}): {folder}"
        )
        session = pytest_session(
            root,
            args.condition,
            ["--sme2-update-baselines", f"--sme2-baselines-dir={root / folder}", *target_args],
            args.timeout,
        )
        refused = refusals(session.pop("_out"))
        if _not_idle(args.condition, session):
            append(results, {**common, "kind": "skipped", "folder": folder, **session, "why": _not_idle_why(session)})
            shutil.rmtree(root / folder, ignore_errors=True)  # never judged: it was not recorded idle
            log(f"baseline not recorded idle, recorded as skipped ({_not_idle_why(session)})")
            continue
        files = baseline_files(root / folder)
        line = {
            **common,
            "kind": "baseline",
            "folder": folder,
            **session,
            "max_other_busy": args.max_other_busy,
            "written": sorted(files),
            "asked_replicas": {t: asked_replicas(p) for t, p in files.items()},
            "refused": sorted(set(TESTS) - set(files)),
            "refusal_text": refused,
        }
        append(results, line)
        baselines.append(line)
        log(
            f"baseline {folder}: {session['seconds']:.0f} s, written {line['written']}, refused {line['refused']}, "
            f"load {session['start']['loadavg'][0]:.2f} -> {session['end']['loadavg'][0]:.2f}"
        )
    folders = [root / line["folder"] for line in usable()]
    if not folders:
        log(
            f"no baseline folder holds a written baseline ({len(baselines)} recorded, every test refused): "
            "no session is run, since nothing could judge it"
        )
    else:
        asked = build_union(root, folders)
        log(f"sessions measure, per test, the most processes any baseline asks for: {asked}")
    while folders and len(sessions) < args.sessions and time.time() < deadline:
        if not _start(args, deadline, log, results, common):
            break
        session = pytest_session(
            root,
            args.condition,
            [f"--sme2-baselines-dir={root / 'baselines-union'}", "-o", "sme2_baseline_missing=skip", *target_args],
            args.timeout,
        )
        session.pop("_out")
        if _not_idle(args.condition, session):
            line = {**common, "kind": "skipped", **session, "why": _not_idle_why(session)}
            append(results, line)
            log(f"session not idle, recorded as skipped ({line['why']})")
            continue
        line = {
            **common,
            "kind": "session",
            **session,
            "max_other_busy": args.max_other_busy,
            "invalid": session["ran"] < len(TESTS) or session["session_dir"] is None,
        }
        append(results, line)
        log(
            f"session {len(sessions) + 1} of {args.sessions}: {session['seconds']:.0f} s, own verdict failed "
            f"{session['failed'] or 'none'}, load {session['start']['loadavg'][0]:.2f} -> "
            f"{session['end']['loadavg'][0]:.2f}, {session['start']['other_busy_processes']} other busy processes"
        )
        if not line["invalid"]:
            sessions.append(line)
        judge_all(root, results, common, usable(), sessions, log)
    judge_all(root, results, common, usable(), sessions, log)


def _not_idle(condition: str, session: dict[str, Any]) -> bool:
    """An idle-condition session whose start found the machine busier than IDLE_LOAD: never labelled idle."""
    return condition == "idle" and session["start"]["loadavg"][0] > IDLE_LOAD


def _not_idle_why(session: dict[str, Any]) -> str:
    return f"1-minute load average {session['start']['loadavg'][0]:.2f} > {IDLE_LOAD} at the start"


def judge_all(
    root: Path,
    results: Path,
    common: dict[str, Any],
    baselines: list[dict[str, Any]],
    sessions: list[dict[str, Any]],
    log,
) -> None:
    """Judge every (baseline folder, later session) pair not judged yet by this code; append one line per test,
    naming the code that judged it (``judged_by``: a change to the gate judges the recorded pairs again)."""
    judged_by = _gate_code()
    done = {
        (line["baseline"], line["session"])
        for line in read_lines(results)
        if line["kind"] == "pair" and line.get("work") == common["work"] and judged_by_of(line) == judged_by
    }
    for session in sessions:
        for baseline in baselines:
            pair = (baseline["folder"], session["session_dir"])
            if pair in done or baseline["end"]["time"] > session["start"]["time"] or not baseline["written"]:
                continue  # judged already, or the baseline was not recorded before the session
            out = root / "checks" / f"{Path(pair[1]).name}~{pair[0]}"
            verdicts = judge(root, root / pair[0], root / pair[1], out)
            for test, verdict in sorted(verdicts.items()):
                append(
                    results,
                    {
                        **common,
                        "kind": "pair",
                        "baseline": pair[0],
                        "session": pair[1],
                        "test": test,
                        **verdict,
                        "judged": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "judged_by": judged_by,
                    },
                )
            alarms = [t for t, v in verdicts.items() if v["verdict"] in ("failed", "error")]
            log(
                f"judged {pair[1]} against {pair[0]}: "
                + ", ".join(f"{t} {v['verdict']}" for t, v in sorted(verdicts.items()))
                + (f" -- FALSE ALARM OR CHECK ERROR: {alarms}" if alarms else "")
            )


def judged_by_of(line: dict[str, Any]) -> str:
    """The code that judged a pair line: the tree of pytest_sme2/ (``tree HASH``), or for lines judged before
    that was kept, the commit."""
    return line.get("judged_by") or line.get("commit", "")


def rejudge(args: argparse.Namespace) -> None:
    """Judge every recorded (baseline folder, later session) pair of every study project still on disk again
    with the code as it is now, appending the verdicts (summary reads the newest judging by default)."""
    lines = read_lines(args.results)
    works = sorted({line["work"] for line in lines if line["kind"] in ("baseline", "session")})
    for work in works:
        root = Path(work)
        if not root.is_dir():
            continue
        mine = [line for line in lines if line.get("work") == work]
        common = {k: mine[0][k] for k in ("target", "condition", "work", "machine")} | {"commit": _commit()}
        baselines = [
            line for line in mine if line["kind"] == "baseline" and line["written"] and (root / line["folder"]).is_dir()
        ]
        sessions = [
            line
            for line in mine
            if line["kind"] == "session"
            and not line.get("invalid")
            and line.get("session_dir")
            and (root / line["session_dir"]).is_dir()
            and (not args.sessions_from or line["start"]["time"] >= args.sessions_from)
        ]

        def log(text: str, where: str = f"{common['target']}/{common['condition']}") -> None:
            print(f"[{time.strftime('%H:%M:%S')}] {where}: {text}", flush=True)

        judge_all(root, args.results, common, baselines, sessions, log)


# ---------------------------------------------------------------- the table


def summary_rows(
    lines: Iterable[dict[str, Any]], judged_by: str | None = None, sessions_from: str | None = None
) -> list[dict[str, Any]]:
    """Per target and condition: baselines written/refused, sessions, pairs judged, alarms and bounds.
    ``judged_by``: count the pairs that code judged (default: per target and condition, the code of the newest
    judging). ``sessions_from``: count only sessions started at or after this time (ISO, UTC): sessions
    recorded after a setting was chosen from earlier ones, a held-out test of it."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        groups[_key(line["target"], line["condition"])].append(line)
    rows = []
    for (target, condition), group in sorted(groups.items()):
        held_out = {
            rec["session_dir"]
            for rec in group
            if rec["kind"] == "session" and (not sessions_from or rec["start"]["time"] >= sessions_from)
        }
        judged = [rec for rec in group if rec["kind"] == "pair"]
        newest = max(judged, key=lambda rec: rec.get("judged", ""), default=None)
        code = judged_by or (judged_by_of(newest) if newest else None)
        baselines = [rec for rec in group if rec["kind"] == "baseline"]
        sessions = [
            rec
            for rec in group
            if rec["kind"] == "session" and not rec.get("invalid") and rec["session_dir"] in held_out
        ]
        pairs = [
            rec
            for rec in judged
            if rec["verdict"] in ("passed", "failed") and judged_by_of(rec) == code and rec["session"] in held_out
        ]
        alarms = [rec for rec in pairs if rec["verdict"] == "failed"]
        judged_sessions = {(rec["work"], rec["session"]) for rec in pairs}
        alarmed_sessions = {(rec["work"], rec["session"]) for rec in alarms}
        session_tests = {(rec["work"], rec["session"], rec["test"]) for rec in pairs}
        alarmed_tests = {(rec["work"], rec["session"], rec["test"]) for rec in alarms}
        used_baselines = {(rec["work"], rec["baseline"]) for rec in pairs}
        loads = [rec[side]["loadavg"][0] for rec in [*baselines, *sessions] for side in ("start", "end")]
        busy = [rec[side]["other_busy_processes"] for rec in [*baselines, *sessions] for side in ("start", "end")]
        # refused: the project's tests with no written file, derived from "written" (what the folder holds)
        # rather than read back, so an early line whose stored list was miscounted cannot mislead
        baselines = [{**rec, "refused": sorted(set(TESTS) - set(rec["written"]))} for rec in baselines]
        refused = sum(len(rec["refused"]) for rec in baselines)
        disturbed = [
            int(a) / int(b)
            for rec in baselines
            for text in (rec.get("refusal_text") or {}).values()
            for a, b in re.findall(r"(\d+) of (\d+) runs were disturbed", text)
        ]
        rows.append(
            {
                "target": target,
                "condition": condition,
                "judged_by": code,
                "sessions_from": sessions_from,
                "baseline_folders": len(baselines),
                "baselines_written": sum(len(rec["written"]) for rec in baselines),
                "baselines_refused": refused,
                "refused_by_test": dict(sorted(_count(t for rec in baselines for t in rec["refused"]).items())),
                "refused_disturbed_range": [min(disturbed), max(disturbed)] if disturbed else None,
                "sessions": len(sessions),
                "judged_sessions": len(judged_sessions),
                "baselines_used": len(used_baselines),
                "skipped_not_idle": sum(rec["kind"] == "skipped" for rec in group),
                "waited_minutes": round(sum(rec["seconds"] for rec in group if rec["kind"] == "waited") / 60),
                "pairs": len(pairs),
                "pair_alarms": len(alarms),
                "pair_bound": upper_bound(len(alarms), len(pairs)),
                "session_tests": len(session_tests),
                "session_test_alarms": len(alarmed_tests),
                "session_test_bound": upper_bound(len(alarmed_tests), len(session_tests)),
                "session_alarms": len(alarmed_sessions),
                "session_bound": upper_bound(len(alarmed_sessions), len(judged_sessions)),
                "inconclusive_pairs": sum(1 for rec in pairs if rec.get("inconclusive")),
                "missing_pairs": sum(
                    1
                    for rec in judged
                    if rec["verdict"] == "missing" and judged_by_of(rec) == code and rec["session"] in held_out
                ),
                "check_errors": [
                    {k: rec.get(k) for k in ("baseline", "session", "exit", "stderr")}
                    for rec in judged
                    if rec["verdict"] == "error" and judged_by_of(rec) == code and rec["session"] in held_out
                ],
                "load_range": [min(loads), max(loads)] if loads else None,
                "busy_range": [min(busy), max(busy)] if busy else None,
                "alarms": [
                    {k: a.get(k) for k in ("baseline", "session", "test", "verdict", "message")} for a in alarms
                ],
            }
        )
    return rows


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return counts


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table docs/performance.md shows."""
    head = (
        "| target | condition | baseline folders (tests written / refused) | unchanged sessions | "
        "judged pairs: false alarms, 95% upper bound | session-tests: alarms, bound | sessions: alarms, bound "
        "| load average (1 min) | other busy processes |\n|---|---|---|---|---|---|---|---|---|"
    )
    body = []
    for r in rows:
        load = "-" if not r["load_range"] else f"{r['load_range'][0]:.1f}-{r['load_range'][1]:.1f}"
        busy = "-" if not r["busy_range"] else f"{r['busy_range'][0]}-{r['busy_range'][1]}"
        body.append(
            f"| {r['target']} | {r['condition']} | {r['baseline_folders']} ({r['baselines_written']} / "
            f"{r['baselines_refused']}) | {r['sessions']} | {r['pairs']}: {r['pair_alarms']}, "
            f"{100 * r['pair_bound']:.1f}% | {r['session_tests']}: {r['session_test_alarms']}, "
            f"{100 * r['session_test_bound']:.1f}% | {r['judged_sessions']}: {r['session_alarms']}, "
            f"{100 * r['session_bound']:.1f}% | {load} | {busy} |"
        )
    return "\n".join([head, *body])


def summary(args: argparse.Namespace) -> None:
    rows = summary_rows(read_lines(args.results), args.judged_by, args.sessions_from)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(table(rows))
    for r in rows:
        need = max(0, TARGET_PAIRS - r["pairs"]) if not r["pair_alarms"] else None
        shaken = r["refused_disturbed_range"]
        print(
            f"\n{r['target']}/{r['condition']} (judged by {r['judged_by']}"
            + (f", sessions from {r['sessions_from']}" if r["sessions_from"] else "")
            + f"): refused baselines per test {r['refused_by_test'] or 'none'}"
            + (f" ({100 * shaken[0]:.0f}-{100 * shaken[1]:.0f}% of their runs disturbed)" if shaken else "")
            + f"; {r['waited_minutes']} minutes waited for the machine; "
            f"{r['skipped_not_idle']} session(s) skipped as not idle; {r['inconclusive_pairs']} passing pair(s) "
            f"with inconclusive verdicts; {r['missing_pairs']} pair-test(s) without a baseline (not counted); "
            f"{len(r['check_errors'])} check command error(s) (not verdicts, listed below); "
            + (
                f"{need} more alarm-free pairs reach the 1% bound"
                if need is not None
                else f"{r['pair_alarms']} false alarm(s):"
            )
        )
        for error in r["check_errors"]:
            print(f"  check error: {error}")
        for alarm in r["alarms"]:
            print(
                f"  {alarm['test']} in {alarm['session']} against {alarm['baseline']}: "
                f"{(alarm.get('message') or '').splitlines()[:3]}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    go = commands.add_parser("run", help="record baselines and sessions up to the counts, judging every pair")
    go.add_argument("--condition", choices=tuple(CONDITIONS), required=True)
    go.add_argument("--local", action="store_true", help="the local target (native runner) instead of the host")
    go.add_argument("--baselines", type=int, default=5, help="baseline folders to record (K)")
    go.add_argument("--sessions", type=int, default=20, help="unchanged sessions to record (M)")
    go.add_argument(
        "--baseline-attempts",
        type=int,
        help="record at most this many baseline folders in all, refused ones included (default 2 K)",
    )
    go.add_argument(
        "--max-other-busy",
        type=int,
        help="start a session only when at most this many other processes are busy (default: any)",
    )
    go.add_argument("--hours", type=float, default=24.0, help="start nothing new after this many hours")
    go.add_argument("--timeout", type=float, default=3600.0, help="seconds one pytest session may take")
    go.add_argument("--work", type=Path, help="the study's project (default .sme2/false-alarms/TARGET-CONDITION)")
    go.add_argument("--results", type=Path, default=RESULTS)
    go.set_defaults(handler=run)
    show = commands.add_parser("summary", help="the current table per target and condition")
    show.add_argument("--results", type=Path, default=RESULTS)
    show.add_argument("--json", action="store_true")
    show.add_argument("--judged-by", help="the code (commit) whose judgings to count (default: the newest judging's)")
    show.add_argument("--sessions-from", help="count only sessions started at or after this time (ISO, UTC)")
    show.set_defaults(handler=summary)
    again = commands.add_parser("rejudge", help="judge every recorded pair again with the code as it is now")
    again.add_argument("--results", type=Path, default=RESULTS)
    again.add_argument("--sessions-from", help="only sessions started at or after this time (ISO, UTC)")
    again.set_defaults(handler=rejudge)
    args = parser.parse_args()
    args.handler(args)


if __name__ == "__main__":
    main()
