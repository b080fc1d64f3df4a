"""The ``pytest-sme2`` command. Exit codes: 0 ok; 1 a finding of a command that worked (doctor: something
is missing; compare: below --min-speedup; check: a regression); 2 the command could not do its job (bad usage,
an unreadable or damaged input, an output it cannot write, a failed build or setup), always with one message, never a
traceback, so a CI step can tell "found a problem" from "could not look"."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import Sme2Error


def _build_runner(args: argparse.Namespace) -> int:
    from pytest_sme2.run.native.build import build_mask_library, build_runner

    runner = build_runner(args.arch, force=args.force)
    print(f"runner: {runner}")
    if args.mask:
        print(f"SME2-masking preload library: {build_mask_library(args.arch, force=args.force)}")
    return 0


def _setup_emulation(args: argparse.Namespace) -> int:
    from pytest_sme2.run import emulation_setup

    status = emulation_setup.setup(force=args.force)
    print(f"qemu-aarch64: {status.qemu} ({status.version or '?'})")
    print(f"aarch64 runner: {status.runner}")
    if not status.ready:
        print(f"pytest-sme2 setup-emulation: not ready: {status.problem}", file=sys.stderr)
        return 2
    print("emulated SME2 target ready: qemu -cpu max reports SME2")
    return 0


def _init(args: argparse.Namespace) -> int:
    from pytest_sme2.cli.init import init

    written = init(args.model, args.name, args.dtype, Path(args.tests_dir))
    print(f"wrote {written.conftest} (registers the model) and {written.test_file} (its perf test)")
    print("next: record its baselines (commit baselines/), then check against them:")
    for command in written.next_commands:
        print(f"  {command}")
    return 0


def _analyze(args: argparse.Namespace) -> int:
    from pytest_sme2.report.commands import analyze

    print(analyze(Path(args.etdump), _path(args.etrecord), _path(args.warmup), args.json))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from pytest_sme2.report.commands import compare_files

    text, result = compare_files(Path(args.a), Path(args.b), args.json)
    print(text)
    if args.min_speedup is not None:
        if result["speedup"] is None:  # emulated time is not time: no speedup was measured, so none can be judged
            print(
                f"--min-speedup {args.min_speedup:g} not judged: "
                + (
                    f"{', '.join(result.get('emulated_files') or [])} ran on the emulated target, whose time is "
                    f"not time (no speedup); judge counted instructions with the plugin's gate instead"
                    if result.get("emulated_files")
                    else "no speedup could be computed"
                ),
                file=sys.stderr,
            )
            return 2
        if result["speedup"]["low"] < args.min_speedup:
            print(f"speedup lower bound below --min-speedup {args.min_speedup:g}", file=sys.stderr)
            return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    from pytest_sme2.report.combined import session_target, sessions_in, write_combined
    from pytest_sme2.report.commands import rebuild_report

    folders = [Path(d) for d in args.artifacts_dir]
    if len(folders) > 1:
        written = write_combined(folders, _path(args.out) or Path("sme2-combined-report"))
    else:
        sessions = sessions_in(folders[0]) if not (folders[0] / "summary.json").exists() else []
        if sessions:  # an artifacts folder: say which sessions it holds and how to report them
            print(f"{folders[0]} holds {len(sessions)} session(s), oldest first; report one, or several side by side:")
            for session in sessions:
                print(f"  {session}  {session_target(session)}")
            print(f"  pytest-sme2 report {sessions[-1]}")
            if len(sessions) > 1:
                print(f"  pytest-sme2 report {sessions[-2]} {sessions[-1]} --out combined-report")
            return 0
        written = rebuild_report(folders[0], _path(args.out))
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


def _history(args: argparse.Namespace) -> int:
    from pytest_sme2.report.history_report import history_lines, write_history_report

    written, found, short = write_history_report(Path(args.history), _path(args.out) or Path("sme2-history-report"))
    for line in history_lines(found, short):
        print(line)
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


def _bisect(args: argparse.Namespace) -> int:
    from pytest_sme2.cli import bisect

    pytest_args = args.pytest_args
    out = _path(args.out) or Path(".sme2") / f"bisect-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    result = bisect.run(args.good, args.bad, pytest_args, out)
    for step in result.steps:
        print(bisect.step_line(step) + (f" ({step['pytest_summary']})" if step["pytest_summary"] else ""))
    print(result.message)
    return 0 if result.first_bad else 1


def _check(args: argparse.Namespace) -> int:
    from pytest_sme2.gate.gate import check_session
    from pytest_sme2.report.summary import load_summary

    folder = Path(args.session_dir)
    summary = load_summary(folder)
    session = folder if folder.is_dir() else folder.parent
    out = _path(args.out) or session / "check"
    results = check_session(summary["tests"], _path(args.baselines), args.missing, out)
    for result in results:
        if result.failed:
            print(f"FAILED {result.test_id}\n{result.message()}\n")
        else:
            shown = "; ".join(result.outcome["missing"]) or _verdict_counts(result.outcome["verdicts"])
            print(f"passed {result.test_id} ({shown})")
    failed = sum(r.failed for r in results)
    where = _path(args.baselines) or "the session's baselines folder"
    print(f"{failed} of {len(results)} test(s) failed against {where}; every verdict: {out}")
    return 1 if failed else 0


def _cache_verify(args: argparse.Namespace) -> int:
    from pytest_sme2.cli.cache_verify import verify
    from pytest_sme2.cli.project_models import project_registry

    folder = Path(args.cache_dir)
    registry, configuration = project_registry(Path(args.project))
    if args.sample:
        shown = ", ".join(registry.names) or "none"
        print(f"models re-derived from: {configuration or 'no pytest configuration'} (registers {shown})")
    checks = verify(folder, args.sample, registry, progress=lambda line: print(line, flush=True))
    for check in checks:
        print(f"{check.state:>10}  {check.entry.name}  {check.detail}")
    differ = sum(c.state == "DIFFERS" for c in checks)
    stale = sum(c.state == "stale" for c in checks)
    verified = sum(c.rederived is not None for c in checks)
    unverified = sum(c.state == "UNVERIFIED" for c in checks)
    print(
        f"{len(checks)} export cache entr{'y' if len(checks) == 1 else 'ies'} in {folder}: {verified} verified "
        f"(exported again and equal), {differ} differ, {unverified} not verified"
        + (f", {stale} stale" if stale else "")
        + (" (--allow-unverified)" if unverified and args.allow_unverified else "")
    )
    return 1 if differ or (unverified and not args.allow_unverified) else 0


def _count(text: str) -> int:
    """argparse type of a count: a whole number >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0, e.g. 3")
    return int(text)


def _verdict_counts(judged: list[dict[str, object]]) -> str:
    """ "13 verdict(s), 1 inconclusive": a passing test's verdicts (gate outcome: ``Verdict.as_dict``), with those
    that were not plain passes."""
    from collections import Counter

    from pytest_sme2.gate.verdict import Verdict
    from pytest_sme2.report.entries import shown_status

    special = Counter(status for status in (shown_status(Verdict.from_dict(v)) for v in judged) if status != "ok")
    return ", ".join([f"{len(judged)} verdict(s)", *(f"{n} {status}" for status, n in sorted(special.items()))])


def _doctor(args: argparse.Namespace) -> int:
    from pytest_sme2.cli.doctor import MISSING, check_device_target, run_checks

    if args.sme2_target is not None:
        check_device_target(args.sme2_target)  # a usage error (exit 2), before any check runs
    checks = run_checks(
        args.sme2_target, args.sme2_runner, {option.name: getattr(args, option.dest) for option in _doctor_options()}
    )
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"{check.state:>7}  {check.name.ljust(width)}  {check.detail}")
        if check.fix and check.state != "ok":
            print(f"{'':>7}  {'':{width}}  fix: {check.fix}")
    return 1 if any(c.state == MISSING for c in checks) else 0


def _doctor_options() -> list[Any]:
    """The registered targets' options that decide whether a target can be reached (``Option.doctor``): arguments
    of ``doctor --sme2-target`` as of a session."""
    from pytest_sme2.run.targets import target_options

    return [option for option in target_options() if option.doctor]


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _speedup_bound(text: str) -> float:
    """argparse type of --min-speedup: a finite number above 0 (nan would make every comparison pass)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; pass e.g. --min-speedup 1.5") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a speedup: pass a finite number above 0, e.g. 1.5")
    return value


def _add_registry_commands(commands: Any, cache_commands: Any) -> None:
    """The commands whose arguments come from the registered targets' options (``cache prune``, ``calibrate``,
    ``doctor``): one place that reads the registry, so an install older than the checkout is one message."""
    from pytest_sme2.cli import cache_prune, calibrate

    cache_prune.add_parser(cache_commands)
    calibrate.add_parser(commands)
    doctor = commands.add_parser(
        "doctor",
        help="what this machine can do, with the command that fixes each missing "
        "piece (exit 1 if something is missing)",
    )
    doctor.add_argument(
        "--sme2-target",
        help="also check this device as a session would use it: adb or adb:SERIAL "
        "(its ABI, kernel and SME2, and whether the runner starts there, SME2 on and off)",
    )
    doctor.add_argument("--sme2-runner", help="check this runner instead of pytest-sme2's own")
    for option in _doctor_options():
        doctor.add_argument(option.flag_text, dest=option.dest, help=option.help)
    doctor.set_defaults(handler=_doctor)


def _add_setup_commands(commands: Any) -> None:
    """The commands that make a project ready (``build-runner``, ``setup-emulation``, ``init``): one group, read
    together by whoever sets a machine up."""
    from pytest_sme2.cli.init import DTYPES as INIT_DTYPES

    build = commands.add_parser("build-runner", help="build (or reuse) the native runner for a target architecture")
    build.add_argument(
        "--arch",
        default="host",
        choices=("host", "linux-aarch64"),
        help="host (default), or linux-aarch64 (cross build against the aarch64 executorch wheel)",
    )
    build.add_argument("--force", action="store_true", help="rebuild even if a cached build exists")
    build.add_argument(
        "--no-mask", dest="mask", action="store_false", help="skip the SME2-masking preload library (Linux)"
    )
    build.set_defaults(handler=_build_runner)
    emulate = commands.add_parser(
        "setup-emulation",
        help="fetch qemu-user 11.1 from Debian (no root, system apt sources untouched), install the aarch64 "
        "cross compiler (as root) and build the aarch64 runner",
    )
    emulate.add_argument("--force", action="store_true", help="fetch and rebuild even if cached")
    emulate.set_defaults(handler=_setup_emulation)
    start = commands.add_parser(
        "init",
        help="register a model module and write a perf test for it: a conftest.py "
        "and test_<name>.py in the tests folder (never overwritten), then the next two commands",
    )
    start.add_argument(
        "model", help="the model: a .py file, or a module name, defining get_eager_model() and " "get_example_inputs()"
    )
    start.add_argument("--name", help="the name tests use in @pytest.mark.model (default: the file's or module's name)")
    start.add_argument("--dtype", default="fp32", choices=INIT_DTYPES, help="the test's export dtype")
    start.add_argument("--tests-dir", default="perf_tests", help="where to write the two files (default perf_tests)")
    start.set_defaults(handler=_init)


def _add_profile_commands(commands: Any) -> None:
    """The commands that read ETDumps directly (``analyze``, ``compare``), without a session."""
    analyze = commands.add_parser(
        "analyze", help="an ETDump's profile as tables: latency, categories, operators, " "delegation, SME kernel path"
    )
    analyze.add_argument("etdump", help="timed ETDump (.etdp/.etdump)")
    analyze.add_argument("--etrecord", help="ETRecord of the .pte: checked, and kept for Profile.inspector()")
    analyze.add_argument("--warmup", help="warmup ETDump holding load/init, when the runner split them")
    analyze.add_argument("--json", action="store_true", help="print the profile digest as JSON")
    analyze.set_defaults(handler=_analyze)
    compare = commands.add_parser(
        "compare", help="B against A: E2E speedup with interval, category and operator deltas"
    )
    compare.add_argument("a", help="reference ETDump (e.g. SME2 off)")
    compare.add_argument("b", help="ETDump to compare (e.g. SME2 on); speedup = median(A) / median(B)")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument(
        "--min-speedup",
        type=_speedup_bound,
        default=None,
        help="exit 1 when the speedup's lower 95%% bound is below this",
    )
    compare.set_defaults(handler=_compare)


def _add_report_commands(commands: Any) -> None:
    """The commands that draw a finished session or a history file again (``report``, ``history``)."""
    report = commands.add_parser(
        "report",
        help="rebuild report.html and summary.md from a session's summary.json; "
        "with several sessions (e.g. one per target), one report with them side by side",
    )
    report.add_argument(
        "artifacts_dir",
        nargs="+",
        help="session folders (.sme2/artifacts/session-<time>-<pid>) or summary.json files; an "
        "artifacts folder lists its sessions",
    )
    report.add_argument(
        "--out",
        help="write into this folder (one session: instead of the session folder; several: "
        "default ./sme2-combined-report)",
    )
    report.set_defaults(handler=_report)
    trend = commands.add_parser(
        "history",
        help="draw a --sme2-history file per test and quantity over sessions and "
        "list where each changed (change points)",
    )
    trend.add_argument("history", help="the JSON Lines file sessions appended to with --sme2-history")
    trend.add_argument("--out", help="write history.html and history.md here (default ./sme2-history-report)")
    trend.set_defaults(handler=_history)


def _add_gate_commands(commands: Any) -> None:
    """The commands that judge against baselines outside a pytest session (``bisect``, ``check``)."""
    bisect = commands.add_parser(
        "bisect",
        help="the first commit between GOOD and BAD where the given perf tests "
        "fail (git bisect run with the gate; untestable commits are skipped)",
    )
    bisect.add_argument("good", help="a commit where the tests pass")
    bisect.add_argument("bad", help="a later commit where they fail")
    bisect.add_argument("--out", help="folder for each step's session and verdict (default .sme2/bisect-<time>)")
    bisect.epilog = "then -- and the pytest arguments of the tests, e.g. -- perf_tests/test_net.py -m sme2"
    bisect.set_defaults(handler=_bisect)
    check = commands.add_parser(
        "check",
        help="judge a finished session's summary.json against stored baselines, as "
        "its tests were judged in pytest (exit 1 on a regression)",
    )
    check.add_argument(
        "session_dir", help="a session folder (.sme2/artifacts/session-<time>-<pid>) or its summary.json"
    )
    check.add_argument("--baselines", help="judge against this baselines folder (default: the one the session used)")
    check.add_argument(
        "--missing",
        choices=("fail", "skip", "warn"),
        help="a test without a baseline: fail | skip | warn (default: the session's policy)",
    )
    check.add_argument("--out", help="write each test's verdicts here (default SESSION_DIR/check)")
    check.set_defaults(handler=_check)


def _add_cache_commands(commands: Any) -> Any:
    """The ``cache`` command and its ``verify``; returns its subcommands, which ``cache prune`` joins later."""
    cache = commands.add_parser(
        "cache",
        help="the export cache: verify that its entries are what they say; prune .sme2/ to its bound",
    )
    cache_commands = cache.add_subparsers(dest="cache_command", required=True)
    verify = cache_commands.add_parser(
        "verify",
        help="check every entry's recorded digests and export a random sample again from the model the project "
        "registers under its name, with its recipe, comparing program digest, key and files (exit 1 when any "
        "entry differs or a sampled one could not be verified)",
    )
    verify.add_argument(
        "cache_dir",
        nargs="?",
        default=".sme2/cache",
        help="the export cache folder (--sme2-cache-dir; default .sme2/cache)",
    )
    verify.add_argument(
        "--sample",
        type=_count,
        default=1,
        help="export this many entries again, drawn at random (default 1; 0: recorded digests only; "
        "more than there are: all)",
    )
    verify.add_argument(
        "--project",
        default=".",
        help="the project whose pytest configuration (sme2_model_dirs, sme2_models) registers the models a sampled "
        "entry is exported again from (default: the current folder, found as pytest finds it); nothing the "
        "cache records is run",
    )
    verify.add_argument(
        "--allow-unverified",
        action="store_true",
        help="exit 0 when sampled entries could not be exported again here (their model not registered by the "
        "project, other versions, ExecuTorch's LLM export); they are still listed and counted",
    )
    verify.set_defaults(handler=_cache_verify)
    return cache_commands


def _parser() -> tuple[argparse.ArgumentParser, Any, Any]:
    """The parser with every command that needs no target registry, in the order ``--help`` lists them; with the
    commands and cache subcommands objects the registry's commands are added to."""
    from pytest_sme2._version import __version__

    parser = argparse.ArgumentParser(prog="pytest-sme2", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pytest-sme2 {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_setup_commands(commands)
    _add_profile_commands(commands)
    _add_report_commands(commands)
    _add_gate_commands(commands)
    return parser, commands, _add_cache_commands(commands)


def _handle(args: argparse.Namespace) -> int:
    """Run the parsed command's handler; every error it raises becomes one message and exit 2, never a traceback."""
    command = " ".join(filter(None, (args.command, getattr(args, "cache_command", None))))  # "cache prune"
    try:
        return args.handler(args)
    except Sme2Error as exc:
        print(f"pytest-sme2 {command}: {exc}", file=sys.stderr)
    except OSError as exc:  # an output folder that cannot be written, a file that vanished
        where = f" {exc.filename}" if exc.filename else ""
        print(f"pytest-sme2 {command}: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
    except Exception as exc:  # a bug: still one message and exit 2, with the way to see more
        if os.environ.get("PYTEST_SME2_TRACEBACK"):
            raise
        print(
            f"pytest-sme2 {command}: internal error {type(exc).__name__}: {exc}. This is a bug in "
            "pytest-sme2; run again with PYTEST_SME2_TRACEBACK=1 for the traceback and report it",
            file=sys.stderr,
        )
    return 2


def main(argv: list[str] | None = None) -> int:
    parser, commands, cache_commands = _parser()
    try:  # these read the registered targets' options, which an install older than the checkout cannot give
        _add_registry_commands(commands, cache_commands)
    except (Sme2Error, pytest.UsageError) as exc:  # pytest's: the plugin package says so as it is imported
        print(f"pytest-sme2: {exc}", file=sys.stderr)
        return 2
    argv = list(sys.argv[1:] if argv is None else argv)
    after = argv.index("--") if "--" in argv else len(argv)  # bisect: what follows -- is pytest's, untouched
    args = parser.parse_args(argv[:after])
    args.pytest_args = argv[after + 1 :]
    return _handle(args)


if __name__ == "__main__":
    sys.exit(main())
