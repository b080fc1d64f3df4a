"""summary.md: the session as markdown, short enough for a CI job summary ($GITHUB_STEP_SUMMARY).

Text and tables only (job summaries do not show embedded images): the one
summary table, then per test the SME2 comparison, portable operators worth
delegating, SME kernel-path evidence, the verdict and where the artifacts are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_sme2.report.advice import recommendations
from pytest_sme2.report.entries import EMULATED_NOTE, verdict_text
from pytest_sme2.report.escape import code, text
from pytest_sme2.report.table import (
    NOT_COUNTED,
    SME_INSTRUCTIONS_LABEL,
    THREAD_SCALING_HEADERS,
    columns,
    coverage_text,
    fewer,
    instructions,
    markdown_table,
    modelled_labels,
    modelled_table,
    modelled_text,
    ms,
    pct,
    program_title,
    sme_path_label,
    speedup,
    summary_rows,
    thread_scaling_rows,
)
from pytest_sme2.report.text import (
    KERNEL_TABLE_HEADERS,
    cached_text,
    disturbed_text,
    kernel_comparison_tables,
    kernel_comparison_text,
    kernel_rows_by_op,
    kernel_time_text,
    shares_text,
    slowdown_text,
)


def _rel(path: str, base: Path | None) -> str:
    if base is None:
        return path
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return path


def _top_operators(comparison: Mapping[str, Any], header: str, amount: Callable[[Mapping[str, Any]], str]) -> list[str]:
    """The comparison's top five operators off -> on with their shares, then ``header``'s column (a speedup in
    time, how many times fewer instructions when counted), between blank lines."""
    rows = [
        [
            f"{op['off_op'] or '-'} -> {op['on_op'] or '-'}" if op["off_op"] != op["on_op"] else op["op"],
            pct(op["off_share"]),
            pct(op["on_share"]),
            amount(op),
        ]
        for op in comparison["operators"][:5]
    ]
    return [""] + markdown_table(["operator (off -> on)", "share off", "share on", header], rows) + [""]


def _counted_comparison(c: Mapping[str, Any]) -> list[str]:
    """SME2 on vs off on the emulated target, in counted instructions (no speedups there)."""
    lines = [
        f"SME2 on vs off, {text(program_title(c))} (counted instructions, exact): "
        f"SME2 on needs **{text(fewer(c.get('fewer_instructions')))}**, "
        f"largest category {text(c['bottleneck_off'])} -> {text(c['bottleneck_on'])}."
    ]
    lines += [""] + markdown_table(
        ["category", "share off", "share on", "instructions off", "instructions on", "fewer (off/on)"],
        [
            [
                k["category"],
                pct(k["off_share"]),
                pct(k["on_share"]),
                instructions(k["off_instructions"]),
                instructions(k["on_instructions"]),
                fewer(k["fewer_instructions"]),
            ]
            for k in c["categories"]
        ],
    )
    lines += _top_operators(c, "fewer (off/on)", lambda op: fewer(op.get("fewer_instructions")))
    if c.get("modelled"):
        lines += [text(modelled_text(c["modelled"])), ""]
        headers, rows = modelled_table(c["modelled"])
        lines += (markdown_table(headers, rows) + [""]) if rows else []
    return lines


def _kernel_comparison(kernels: Mapping[str, Any] | None) -> list[str]:
    """Kernels SME2 off vs on, in sampled time per run (when both variants were sampled)."""
    if not kernels:
        return []
    (kind_headers, kind_rows), (top_headers, top_rows) = kernel_comparison_tables(kernels)
    lines = ["", text(kernel_comparison_text(kernels)), ""] + markdown_table(kind_headers, kind_rows)
    return (
        lines
        + [""]
        + markdown_table(
            top_headers, [[code(c) if i in (0, 3) and c else c for i, c in enumerate(row)] for row in top_rows]
        )
    )


def _session_lines(summary: Mapping[str, Any]) -> list[str]:
    """The page's head: where the session ran, the emulation note, the table of every test and the model labels."""
    test_entries = summary["tests"]
    target = summary.get("target") or {}
    lines = ["## pytest-sme2: SME2 performance", ""]
    lines.append(
        f"Target {code(target.get('name', '?'))} ({text(target.get('cpu', '?'))}, SME2 "
        f"{'yes' if target.get('has_sme2') else 'no'}); {len(test_entries)} perf test(s); "
        f"artifacts {code(summary.get('session_dir', '?'))}."
    )
    if any(p.get("emulated") for r in test_entries for p in r["profiles"]):
        lines += [
            "",
            f"> **Emulated target**: kernels, SME path, outputs and instruction counts are real and exact; "
            f"time is not ({EMULATED_NOTE}), so shares there are shares of counted instructions.",
        ]
    lines += [""] + markdown_table(columns(test_entries), summary_rows(test_entries, with_cause=True))
    labels = modelled_labels(test_entries)  # the table's cells give each model's status only
    lines += ([""] + [text(label[0].upper() + label[1:]) + "." for label in labels]) if labels else []
    return lines


def _timed_comparison(comparison: Mapping[str, Any]) -> list[str]:
    """One SME2 on vs off comparison in time: its speedup, categories, kernels, slowdowns and top operators."""
    lines = [
        f"SME2 on vs off, {text(program_title(comparison))}: "
        f"E2E speedup **{text(speedup(comparison['speedup'], comparison['emulated']))}**, bottleneck "
        f"{text(comparison['bottleneck_off'])} -> {text(comparison['bottleneck_on'])}."
    ]
    lines += [""] + markdown_table(
        ["category", "share off", "share on", "speedup [95% CI]"],
        [
            [k["category"], pct(k["off_share"]), pct(k["on_share"]), speedup(k["speedup"], comparison["emulated"])]
            for k in comparison["categories"]
        ],
    )
    lines += _kernel_comparison(comparison.get("kernels"))
    if slowdown_text(comparison):
        lines += ["", text(slowdown_text(comparison))]
    lines += _top_operators(comparison, "speedup [95% CI]", lambda op: speedup(op["speedup"], comparison["emulated"]))
    return lines


def _profile_lines(p: Mapping[str, Any]) -> list[str]:
    """One variant's bullet (its size, shares, delegation and SME path), then its sampled kernel time when present."""
    worth = ", ".join(code(op) for op in p.get("worth_delegating", [])) or "none"
    measure = "instructions" if p.get("basis") == "instructions" else "time"
    size = (
        f"{instructions(p['instructions']['per_inference'])} instructions per inference (counted)"
        if measure == "instructions"
        else f"no latency ({NOT_COUNTED})"
        if p.get("emulated")
        else f"median {ms(p['latency']['median_ms'])} ms{disturbed_text(p)}"
    )
    shares = shares_text(p.get("shares") or {}, p.get("other_delegate_outside_ops"))
    lines = [
        f"- **{text(p['variant'])}**{text(cached_text(p))}: {text(size)}, shares of {measure}: {text(shares)}; "
        f"delegated {text(coverage_text(p, run_too=True))}, "
        f"{sme_path_label(p.get('sme_path_basis'), bool(p.get('emulated')))} {text(pct(p['sme_path_share']))} "
        f"({text(p['sme_path_ops'])} ops)"
        + (
            f", {SME_INSTRUCTIONS_LABEL} {pct(p['instructions']['sme_share_of_conv_gemm'])}"
            if p.get("instructions")
            else ""
        )
        + "; "
        f"portable ops worth delegating: {worth}"
        + (
            f"; kernel trace: {len(p['executed_sme_kernels'])} SME/SME2 kernel(s) executed"
            if p.get("executed_sme_kernels") is not None
            else ""
        )
    ]
    kernels = kernel_time_text(p.get("kernel_time"))
    if kernels:
        lines.append(f"  - {text(kernels)}")
        if p["kernel_time"].get("available"):
            lines += [""] + [
                "  " + row for row in markdown_table(KERNEL_TABLE_HEADERS, kernel_rows_by_op(p["kernel_time"], top=8))
            ]
            lines.append("")
    return lines


def _test_lines(test_entry: Mapping[str, Any], base: Path | None) -> list[str]:
    """One test's section: thread scaling, its comparisons and profiles, advice, verdicts and where its files are."""
    lines = ["", f"### {code(test_entry['nodeid'])} ({text(test_entry.get('outcome', '?'))})", ""]
    scaling = thread_scaling_rows(test_entry)
    if scaling:
        lines += ["SME2 speedup by threads:", ""] + markdown_table(THREAD_SCALING_HEADERS, scaling) + [""]
    for c in test_entry.get("comparisons", []):
        lines += _counted_comparison(c) if c.get("unit") == "instructions" else _timed_comparison(c)
    for p in test_entry["profiles"]:
        lines += _profile_lines(p)
    lines += [f"- recommendation: {text(advice)}" for advice in recommendations(test_entry)]
    lines.append(f"- verdict: {text(verdict_text(test_entry.get('verdicts', [])))}")
    for verdict in test_entry.get("verdicts", []):  # a regression as the terminal gives it, cause first
        if verdict.get("verdict") == "regression":
            lines += [
                f"  - {text(line.strip())}" for line in str(verdict.get("message", "")).splitlines() if line.strip()
            ]
    if test_entry.get("test_dir"):
        lines.append(f"- artifacts: {code(_rel(test_entry['test_dir'], base))}")
    if test_entry.get("timeline"):
        lines.append(f"- timeline (ui.perfetto.dev or chrome://tracing): {code(_rel(test_entry['timeline'], base))}")
    return lines


def session_markdown(summary: Mapping[str, Any]) -> str:
    base = Path(summary["session_dir"]) if summary.get("session_dir") else None
    lines = _session_lines(summary)
    for test_entry in summary["tests"]:
        lines += _test_lines(test_entry, base)
    return "\n".join(lines) + "\n"
