"""``pytest-sme2 analyze | compare | report``: the reports without a pytest run.

Inputs are checked up front and every problem is a UsageError naming the file
(exit code 2); a damaged ETDump is the reader's EtdumpError, re-raised as a
UsageError with the same message. Output goes to stdout.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pytest_sme2.errors import EtdumpError, RunnerError, UsageError
from pytest_sme2.evidence.qemu_counts import COUNTS_FILE, InstructionTrace
from pytest_sme2.profile.breakdown import INSTRUCTIONS
from pytest_sme2.profile.profile import Profile
from pytest_sme2.report.entries import compare
from pytest_sme2.report.table import (
    comparison_category_rows,
    comparison_operator_rows,
    fewer,
    instructions,
    ms,
    pct,
    portable_table,
    speedup,
    text_table,
)
from pytest_sme2.report.text import NO_OPERATOR_SHARES, operator_shares, profile_text
from pytest_sme2.run.targets.base import EMULATED_TIMING, RUN_FACTS, RUNNER_LOG, VERSION_KEYS
from pytest_sme2.system.regular_files import SESSION_FILE, RefusedFile, open_checked, read_bytes


def _readable(path: Path, what: str) -> Path:
    if not path.exists():
        raise UsageError(f"{what} {path} does not exist")
    if not path.is_file():
        raise UsageError(f"{what} {path} is not a file")
    try:
        with open_checked(path, SESSION_FILE) as handle:  # a FIFO is refused by its kind, not waited on
            handle.read(1)
    except OSError as exc:
        raise UsageError(f"{what} {path} cannot be read: {exc.strerror}") from None
    return path


def _check_etrecord(path: Path) -> None:
    """Parse the ETRecord so a wrong or damaged file is an error now, not a surprise in Profile.inspector().

    Its edge program is the graph *before* partitioning (checked on executorch
    1.5.1), so it cannot give node-level delegation; that comes from the
    export.json pytest-sme2 writes beside its own exports.
    """
    try:
        from executorch.devtools.etrecord import parse_etrecord

        parse_etrecord(str(path))
    except Exception as exc:  # the ETRecord loader raises many types for a bad file
        raise UsageError(
            f"ETRecord {path} cannot be read ({type(exc).__name__}: {exc}); pass the .etrecord "
            "written with the .pte, by the same executorch version"
        ) from None


def load_profile(etdump: Path, etrecord: Path | None = None, warmup: Path | None = None) -> Profile:
    """A Profile of an ETDump file given on the command line."""
    _readable(etdump, "ETDump")
    if warmup is not None:
        _readable(warmup, "warmup ETDump")
    if etrecord is not None:
        _check_etrecord(_readable(etrecord, "ETRecord"))
    emulated = emulated_run(etdump)
    counts = etdump.parent / COUNTS_FILE
    try:
        # the emulated target's counted instructions beside its ETDump: shares by instructions, as its session read
        instructions = InstructionTrace.from_counts(counts, etdump, warmup) if emulated and counts.is_file() else None
        profile = Profile.from_etdump(
            etdump, warmup, model=etdump.stem, recipe="etdump", variant=etdump.name, instructions=instructions
        )
    except EtdumpError as exc:  # the user named this file: point at the file they meant to name
        raise UsageError(f"{exc}; pass the .etdp file a runner wrote (not a .pte or an ETRecord)") from None
    except RunnerError as exc:  # the counts file beside it is damaged or of another ETDump
        raise UsageError(f"{exc}; or move {counts} away to read {etdump} by its (emulated) time") from None
    if emulated:  # its time is the emulator's: reports say so and compute no speedups from it
        profile.metadata["target"] = {"name": "emulated", "emulated": True}
    profile.artifacts["timed_etdump"] = str(etdump)
    if etrecord:
        profile.artifacts["etrecord"] = str(etrecord)
    return profile


NODES_UNKNOWN = (
    "delegated nodes: n/a: node counts come from the export.json pytest-sme2 writes beside its own "
    "exports; an ETRecord's graph is the one before partitioning (executorch 1.5.1), so it cannot say "
    "which nodes were delegated"
)


def analyze(etdump: Path, etrecord: Path | None, warmup: Path | None, as_json: bool) -> str:
    """One ETDump in words. On an emulated run every amount is counted instructions (emulator time is no time):
    operators sorted by them, and without counts no per-operator or per-category amounts at all."""
    profile = load_profile(etdump, etrecord, warmup)
    entry = profile.to_dict()
    if as_json:  # the warning travels with the numbers it is about
        return json.dumps({**entry, "warning": where_unknown(etdump)}, indent=1, default=str)
    counted = profile.basis == INSTRUCTIONS  # the emulated target: shares of counted instructions
    unknown = where_unknown(etdump)
    lines = ([unknown] if unknown else []) + [profile_text(entry)]
    if entry["node_delegation_coverage"] is None:
        lines.append(f"  {NODES_UNKNOWN}" + (f" ({etrecord} was read)" if etrecord else ""))
    lines += _load_init_lines(profile, entry, counted)
    lines += ["", "categories:"] + _category_lines(profile, entry, counted)
    lines += ["", "top operators:"] + _operator_lines(entry, counted)
    lines += ["", "portable operators:"]
    portable = entry["portable_ops"]
    if not portable:
        lines.append("  none: every operator ran in a delegate")
    else:
        names = ("operator", "worth delegating")
        lines += text_table(*portable_table(portable, entry["worth_delegating"], names, counted, profile.emulated))
    return "\n".join(lines)


def _load_init_lines(profile: Profile, entry: dict[str, Any], counted: bool) -> list[str]:
    """Program::load_method and Method::init, counted or timed; nothing on an uncounted emulated run."""
    if counted and (entry["instructions"]["load"] is not None or entry["instructions"]["init"] is not None):
        load, init = entry["instructions"]["load"], entry["instructions"]["init"]
        return [
            f"  load {instructions(load)} instructions, init {instructions(init)} instructions "
            "(Program::load_method, Method::init; counted, not part of an inference)"
        ]
    if not profile.emulated:
        return [
            f"  load {ms(entry['load_ms'])} ms, init {ms(entry['init_ms'])} ms "
            "(Program::load_method, Method::init; not part of E2E)"
        ]
    return []


def _category_lines(profile: Profile, entry: dict[str, Any], counted: bool) -> list[str]:
    """The category table, with the amount per inference the run measured (none on an uncounted emulated run)."""
    if counted:
        per_run = profile.category_values(INSTRUCTIONS)
        return text_table(
            ["category", "share of instructions", "instructions per inference"],
            [
                [name, pct(share), instructions(float(per_run[name].median()))]
                for name, share in entry["shares"].items()
            ],
        )
    if profile.emulated:
        return text_table(
            ["category", "share of emulator time (not time)"],
            [[name, pct(share)] for name, share in entry["shares"].items()],
        )
    return text_table(
        ["category", "share of E2E", "median ms per run"],
        [[name, pct(share), ms(float(profile.category_ms[name].median()))] for name, share in entry["shares"].items()],
    )


def _operator_lines(entry: dict[str, Any], counted: bool) -> list[str]:
    """The top operators with their amounts, or why a run's per-operator shares are not known."""
    ops = operator_shares(entry)
    if ops is None:
        return [f"  {NO_OPERATOR_SHARES}"]
    amount = "instructions" if counted else "median ms"
    return text_table(
        [
            "operator",
            "category",
            "delegated",
            "SME/SME2",
            amount,
            "share of instructions" if counted else "share of E2E",
        ],
        [
            [
                op["event"],
                op["category"],
                "yes" if op["delegated"] else "portable",
                "yes" if op["packed"] else "no",
                instructions(op["instructions"]) if counted else ms(op["median_ms"]),
                pct(share),
            ]
            for share, op in ops
        ],
    )


def where_unknown(etdump: Path) -> str | None:
    """A warning for an ETDump with neither run.json nor runner.log beside it (copied out of its run folder):
    where it ran cannot be known, and an emulated run's times would read as latency (a copied
    emulated ETDump showed "E2E 180.043 ms" and a 0.98x "speedup"). None when its folder says where it ran."""
    folder = Path(etdump).parent
    if (folder / RUN_FACTS).exists() or (folder / RUNNER_LOG).exists():
        return None
    return (
        f"WARNING: {etdump} has no {RUN_FACTS} or {RUNNER_LOG} beside it, so where it ran is unknown and its "
        f"times are read as a device's; if it came from the emulated target they are emulator time, not "
        f"latency: read it in its run folder (pytest-sme2 keeps {RUN_FACTS} beside each ETDump it writes)"
    )


def run_facts(etdump: Path) -> dict[str, Any] | None:
    """The ``run.json`` (RUN_FACTS, written by the Runner after each run) beside an ETDump, read through the
    checked reader; None when there is none. A damaged one is a UsageError naming the file and the way out."""
    facts = Path(etdump).parent / RUN_FACTS
    try:
        document = json.loads(read_bytes(facts, SESSION_FILE))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError, RefusedFile) as exc:
        raise UsageError(
            f"{facts}, which says where {etdump} ran, cannot be read ({exc}); "
            "move it away to read the ETDump by its runner.log"
        ) from None
    target = document.get("target") if isinstance(document, dict) else None
    if not isinstance(target, dict) or not isinstance(target.get("emulated"), bool):
        raise UsageError(
            f"{facts} has no target.emulated (true or false); move it away to read the ETDump " "by its runner.log"
        )
    return document


def run_versions(etdump: Path) -> dict[str, str]:
    """The executorch, torch and torchao versions that exported and ran an ETDump's program, as its run.json
    says (those of run folders from before it recorded them: none)."""
    versions = (run_facts(etdump) or {}).get("versions")
    if not isinstance(versions, dict):
        return {}
    return {key: str(versions[key]) for key in VERSION_KEYS if isinstance(versions.get(key), str)}


def emulated_run(etdump: Path) -> bool:
    """Whether an ETDump came from the emulated target, as its run folder says: ``run.json`` names the target;
    folders written before it existed (or by hand) are read by their runner.log, whose first line is the command
    that ran (qemu-aarch64 on the emulated target)."""
    document = run_facts(etdump)
    if document is not None:
        return bool(document["target"]["emulated"])
    log = Path(etdump).parent / RUNNER_LOG
    try:
        with open_checked(log, SESSION_FILE) as handle:
            first = handle.readline(64 * 1024).decode("utf-8", "replace")
    except (OSError, RefusedFile):
        return False
    return first.startswith("$ ") and "qemu-aarch64" in first


def version_lines(a: Path, b: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    """A line on the versions behind A and B, side by side when they differ (an upgrade compared: issue 66), and
    the versions for --json. Nothing when neither run folder recorded them."""
    then, now = run_versions(a), run_versions(b)
    versions = {"a": then, "b": now}
    if not then and not now:
        return [], versions

    def text(found: dict[str, str]) -> str:
        return ", ".join(f"{key} {found[key]}" for key in VERSION_KEYS if key in found) or "versions not recorded"

    if then == now:
        return [f"versions (A and B): {text(now)}"], versions
    moved = [key for key in VERSION_KEYS if then.get(key) != now.get(key)]
    change = ", ".join(f"{key} {then.get(key, '?')} -> {now.get(key, '?')}" for key in moved)
    return [f"versions differ, A -> B: {change} (A: {text(then)}; B: {text(now)})"], versions


def _program_shape(profile: Profile) -> dict[str, Counter]:
    """What stays the same between SME2 on and off of one program: its portable operators (by name and
    instruction), its delegate calls (by instruction) and the kinds of its delegated operators (kernel
    formats such as F32/PF32 left out: those are what SME2 changes)."""
    ops = profile.ops
    delegated, portable = ops[ops["delegated"]], ops[~ops["delegated"]]
    return {
        "portable operators": Counter(f"{op} @{i}" for op, i in zip(portable["op"], portable["instruction_id"])),
        "delegate calls": Counter(f"delegate call @{i}" for i in sorted(set(delegated["instruction_id"]))),
        "delegated operator kinds": Counter(str(kind) for kind in delegated["kind"]),
    }


def program_differences(a: Profile, b: Profile, shown: int = 3) -> list[str]:
    """How the programs behind two ETDumps differ (ETDumps carry no program digest); empty when they
    look like the same program run twice."""
    shape_a, shape_b = _program_shape(a), _program_shape(b)
    out = []
    for what in shape_a:
        only_a, only_b = shape_a[what] - shape_b[what], shape_b[what] - shape_a[what]
        if not only_a and not only_b:
            continue
        parts = []
        for label, extra in (("only in A", only_a), ("only in B", only_b)):
            if extra:
                names = [f"{name}" + (f" x{n}" if n > 1 else "") for name, n in extra.most_common(shown)]
                more = len(extra) - len(names)
                parts.append(f"{label}: {', '.join(names)}" + (f" (+{more} more)" if more > 0 else ""))
        out.append(f"{what} differ ({'; '.join(parts)})")
    return out


def compare_files(a: Path, b: Path, as_json: bool) -> tuple[str, dict[str, Any]]:
    """B against A: speedup = median(A) / median(B), so > 1 means B is faster."""
    before, after = load_profile(a), load_profile(b)
    result = compare(on=after, off=before)
    emulated = [str(path) for path, profile in ((a, before), (b, after)) if profile.emulated]
    result["emulated_files"] = emulated
    result["program_differences"] = differences = program_differences(before, after)
    versions, result["versions"] = version_lines(a, b)
    if as_json:
        return json.dumps(result, indent=1, default=str), result
    warning = (
        [
            "WARNING: A and B are ETDumps of DIFFERENT PROGRAMS, so the numbers below are not an SME2 "
            "speedup of one model: " + "; ".join(differences)
        ]
        if differences
        else []
    )
    warning += [text for text in (where_unknown(a), where_unknown(b)) if text]
    warning += versions
    if emulated:  # emulator time is no time: the headline is counted instructions, or that speed is not judged
        lines = _emulated_comparison(a, b, before, after, result)
        return "\n".join(lines[:2] + warning + lines[2:]), result
    lines = [
        f"A: {a} (median {ms(before.median_ms)} ms, {_runs(before.runs)})",
        f"B: {b} (median {ms(after.median_ms)} ms, {_runs(after.runs)})",
        *warning,
        f"E2E speedup of B over A (median A / median B, 95% bootstrap CI): {speedup(result['speedup'])}",
        f"largest category: {result['bottleneck_off']} (A) -> {result['bottleneck_on']} (B)",
        "",
    ]
    lines += text_table(*comparison_category_rows(result, ("A", "B")))
    lines.append("")
    lines += text_table(*comparison_operator_rows(result, ("A", "B"), "operator {}", category=False))
    return "\n".join(lines), result


def _instructions_headline(path: Path, profile: Profile) -> str:
    count = profile.instructions_per_inference
    return (
        f"{path} ({int(round(count)):,} instructions per inference, counted under emulation, " f"{_runs(profile.runs)})"
        if count is not None
        else f"{path} (emulated, no instruction counts beside it, {_runs(profile.runs)})"
    )


def _emulated_comparison(a: Path, b: Path, before: Profile, after: Profile, result: dict[str, Any]) -> list[str]:
    """B against A when either ran under emulation: counted instructions when both were counted, else only
    that speed cannot be judged (an emulator's time says nothing about a CPU's; no ms is printed)."""
    lines = [f"A: {_instructions_headline(a, before)}", f"B: {_instructions_headline(b, after)}"]
    if result["unit"] != INSTRUCTIONS:
        lines.append(
            f"compare cannot judge speed from emulated ETDumps ({', '.join(result['emulated_files'])}): "
            f"{EMULATED_TIMING}, and only counted instructions compare there; run the emulated target "
            f"with its instruction counter, which writes {COUNTS_FILE} beside each ETDump"
        )
        return lines
    ratio = result["fewer_instructions"]
    lines.append(
        "instructions per inference, B against A: "
        + fewer(ratio, "instructions")
        + f" (exact counts; {EMULATED_TIMING}, so no speedup in time)"
    )
    lines += [f"largest category by instructions: {result['bottleneck_off']} (A) -> {result['bottleneck_on']} (B)", ""]
    lines += text_table(*comparison_category_rows(result, ("A", "B")))
    lines.append("")
    lines += text_table(*comparison_operator_rows(result, ("A", "B"), "operator {}", category=False))
    return lines


def rebuild_report(directory: Path, out_dir: Path | None) -> dict[str, Path]:
    from pytest_sme2.report.summary import load_summary, render

    summary = load_summary(directory)
    out = out_dir or (directory if directory.is_dir() else directory.parent)
    try:
        return render(summary, out)
    except OSError as exc:
        raise UsageError(
            f"cannot write the report into {out} ({exc.strerror or exc}"
            f"{f': {exc.filename}' if exc.filename else ''}); pass --out a folder you can write"
        ) from None


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
