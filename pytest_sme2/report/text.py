"""Plain-text digest of a test entry: the "sme2 profiles" section pytest shows for a failing test."""

from __future__ import annotations

from typing import Any, Mapping

from pytest_sme2.profile.breakdown import INSTRUCTIONS
from pytest_sme2.report.entries import EMULATED_NOTE
from pytest_sme2.report.table import (
    SME_INSTRUCTIONS_LABEL,
    from_result_cache,
    ms,
    pct,
    program_title,
    sme_path_label,
    speedup,
)


def _disturbed_parts(summary: Mapping[str, Any]) -> list[str]:
    runs, refs = summary.get("disturbed_runs") or 0, summary.get("disturbed_references") or 0
    throttled = summary.get("throttled_runs") or 0  # counted in disturbed_runs too (device_state.py)
    by_machine = runs - throttled
    return (
        ([f"{by_machine} disturbed by the machine"] if by_machine > 0 else [])
        + ([f"{throttled} taken while the device throttled"] if throttled else [])
        + ([f"{refs} after a disturbed reference run"] if refs else [])
    )


def disturbed_text(summary: Mapping[str, Any]) -> str:
    """ ", 3 disturbed by the machine (left out)" or nothing: every report says how many runs were disturbed."""
    parts = _disturbed_parts(summary)
    return f" ({', '.join(parts)}: left out of verdicts)" if parts else ""


def disturbed_cell(summary: Mapping[str, Any]) -> str:
    """The same count as a table cell: ``2 of 40 (2 after a disturbed reference run)`` or ``0 of 40``."""
    left_out = (summary.get("disturbed_runs") or 0) + (summary.get("disturbed_references") or 0)
    parts = _disturbed_parts(summary)
    return f"{left_out} of {summary.get('runs', '?')}" + (f" ({', '.join(parts)})" if parts else "")


OUTSIDE_OPS_LABEL = "delegate, no operator"


def shares_text(shares: Mapping[str, float], outside_ops: float | None) -> str:
    """``CONV 47.0%, ..., OTHER 20.1% (of which delegate, no operator 16.6%)``: OTHER's delegate time outside
    every delegate operator is shown apart, since it is time no operator can be blamed for."""
    parts = [f"{name} {pct(value)}" for name, value in shares.items()]
    if outside_ops and "OTHER" in shares:
        index = list(shares).index("OTHER")
        parts[index] += f" (of which {OUTSIDE_OPS_LABEL} {pct(outside_ops)})"
    return ", ".join(parts)


def kernel_time_text(kernel_time: Mapping[str, Any] | None) -> str | None:
    """One line on a profile's sampled kernels, or why there are none; None where sampling was off."""
    if not kernel_time:
        return None
    if not kernel_time.get("available"):
        return f"kernels: not sampled ({kernel_time.get('problem')})"
    kinds = ", ".join(
        f"{kind} {ms_value:.3f} ms" for kind, ms_value in (kernel_time.get("kind_ms_per_run") or {}).items()
    )
    top = "; ".join(f"{k['kernel']} ({k['kind']}, {pct(k['share'])})" for k in kernel_time.get("top_kernels", [])[:3])
    etdump = sum(op["etdump_ms_per_run"] or 0.0 for op in kernel_time.get("ops", []))
    # The sampled process is its own round (sampling slows it), so its times are not the timed runs' E2E.
    return (
        f"kernels (a separate sampled process of {kernel_time['runs']} runs, about {etdump:.3f} ms each in its ETDump; "
        f"{kernel_time['samples_placed']} of {kernel_time['samples_total']} samples fell in those runs, the "
        f"rest in loading, setup and runs left out): SME/SME2 kernels "
        f"{pct(kernel_time.get('sme_kernel_share_conv_gemm'))} of "
        f"CONV+GEMM samples; CPU time per run {kinds}; top: {top}"
    )


def kernel_rows_by_op(kernel_time: Mapping[str, Any], top: int = 12) -> list[list[str]]:
    """Rows (operator, category, sampled/ETDump ms per run, top kernel, kind, share, other kernels) of the
    operators with the most samples: the kernel table of the reports."""
    ops = sorted(kernel_time.get("ops", []), key=lambda op: op["samples"], reverse=True)[:top]
    rows = []
    for op in ops:
        kernels = op["kernels"] or [{"kernel": "-", "kind": "-", "share": None}]
        first = kernels[0]
        rest = ", ".join(f"{_short(k['kernel'])} {pct(k['share'])}" for k in kernels[1:3])
        etdump = op["etdump_ms_per_run"]
        rows.append(
            [
                op["op"],
                op["category"],
                f"{op['sampled_ms_per_run']:.3f} / {etdump:.3f}"
                if etdump is not None
                else f"{op['sampled_ms_per_run']:.3f} / -",
                _short(first["kernel"]),
                first["kind"],
                pct(first["share"]),
                rest,
            ]
        )
    return rows


def kernel_comparison_text(kernels: Mapping[str, Any]) -> str:
    return (
        f"Kernels SME2 off vs on (sampled): SME/SME2 kernels {pct(kernels['sme_share_off'])} -> "
        f"{pct(kernels['sme_share_on'])} of CONV+GEMM samples."
    )


def kernel_comparison_tables(kernels: Mapping[str, Any]) -> tuple[tuple[list[str], list[list[str]]], ...]:
    """(headers, rows) of the time per kernel kind, off and on, and of the top kernels off and on side by side."""
    kinds = list(dict.fromkeys([*kernels["kind_ms_off"], *kernels["kind_ms_on"]]))
    by_kind = [[kind, ms(kernels["kind_ms_off"].get(kind)), ms(kernels["kind_ms_on"].get(kind))] for kind in kinds]

    def cells(top: list[Mapping[str, Any]], index: int) -> list[str]:
        if index >= len(top):
            return ["", "", ""]
        return [top[index]["kernel"], top[index]["kind"], ms(top[index]["ms_per_run"])]

    count = max(len(kernels["top_off"]), len(kernels["top_on"]))
    side_by_side = [[*cells(kernels["top_off"], i), *cells(kernels["top_on"], i)] for i in range(count)]
    return (
        (["kernel kind", "ms per run off", "ms per run on"], by_kind),
        (["top kernels off", "kind", "ms per run", "top kernels on", "kind", "ms per run"], side_by_side),
    )


def _short(name: str, limit: int = 72) -> str:
    """A kernel name cut for a table cell (demangled C++ names run to hundreds of characters)."""
    return name if len(name) <= limit else name[: limit - 3] + "..."


KERNEL_TABLE_HEADERS = [
    "operator",
    "category",
    "ms per run (sampled / ETDump)",
    "top kernel",
    "kind",
    "share of operator",
    "next kernels",
]


NO_OPERATOR_SHARES = (
    "per-operator shares not shown: this emulated run has no instruction counts, and emulator "
    "time is not time (its shares change between identical runs)"
)


def size_text(summary: Mapping[str, Any]) -> str:
    """How big one inference was. Emulated: counted instructions per inference, or that there is no measure
    (emulator time is no latency). Hardware: the E2E median, with its interval, spread and CV only from two or
    more runs (one run has no interval and no spread)."""
    lat = summary["latency"]
    counted = summary.get("instructions") if summary.get("basis") == INSTRUCTIONS else None
    if summary.get("emulated"):
        runs = f"{summary['runs']} run{'' if summary['runs'] == 1 else 's'}"
        if counted and counted.get("per_inference") is not None:
            return f"{counted['per_inference']:,} instructions per inference (counted, exact), {runs}"
        return f"no latency: emulated time is not latency, and this run has no instruction counts; {runs}"
    if lat["n"] == 1:
        return f"E2E {lat['median_ms']:.3f} ms, 1 run (one run has no interval and no spread)"
    return (
        f"E2E median {lat['median_ms']:.3f} ms (95% CI {lat['median_ci_low_ms']:.3f}-{lat['median_ci_high_ms']:.3f}),"
        f" p10 {lat['p10_ms']:.3f}, p90 {lat['p90_ms']:.3f}, CV {lat['cv']:.1%}, {lat['n']} runs"
    )


def operator_shares(summary: Mapping[str, Any]) -> list[tuple[float, Mapping[str, Any]]] | None:
    """(share, operator) of the heaviest operators, heaviest first, in the profile's basis: counted instructions
    on a counted emulated run, time on hardware; None on an emulated run without counts, whose only per-operator
    measure is emulator time (not time, and not the same twice)."""
    counted = summary.get("basis") == INSTRUCTIONS
    if summary.get("emulated") and not counted:
        return None
    key = "instruction_share" if counted else "share"
    ops = [(float(op.get(key) or 0.0), op) for op in summary["top_ops"]]
    return sorted(ops, key=lambda pair: pair[0], reverse=True)


def cached_text(profile: Mapping[str, Any]) -> str:
    """Where a counted emulated run was answered from the result cache (run/result_cache.py), saying so and
    its key: an answer from disk must not read like a fresh emulation. Empty otherwise."""
    if not from_result_cache(profile):
        return ""
    return f" (counted run from the result cache, key {profile['metadata']['result_cache'].get('key')})"


def device_state_text(profile: Mapping[str, Any]) -> str | None:
    """``device: governor schedutil, hottest 41.5 C, thermal status none, battery 31.5 C (Charging); throttled:
    ...`` from the state read after the profile's first round (device_state.py); None where none was read."""
    record = (profile.get("metadata") or {}).get("device_state")
    if not record:
        return None
    after = record.get("after") or {}
    parts = [f"governor {record.get('governor') or 'unknown'}"]
    if after.get("hottest_c") is not None:
        parts.append(f"hottest {after['hottest_c']:.1f} C")
    if after.get("thermal_status") is not None:
        from pytest_sme2.run.device_state import THERMAL_STATUS

        parts.append(f"thermal status {THERMAL_STATUS[min(int(after['thermal_status']), len(THERMAL_STATUS) - 1)]}")
    if after.get("battery_temp_c") is not None:
        parts.append(
            f"battery {after['battery_temp_c']:.1f} C"
            + (f" ({after['battery_status']})" if after.get("battery_status") else "")
        )
    if record.get("cooldown_s"):
        parts.append(
            f"cooled down {record['cooldown_s']:.0f} s first"
            + (f", still {record['still_hot_after_cooldown']}" if record.get("still_hot_after_cooldown") else "")
        )
    text = "device: " + ", ".join(parts)
    if after.get("missing"):
        text += f"; not readable: {', '.join(after['missing'])}"
    throttled = profile.get("throttled_runs") or 0
    if throttled:
        text += f"; {throttled} runs taken while throttled ({record.get('throttled') or 'a later round'})"
    return text


def profile_text(summary: Mapping[str, Any]) -> str:
    shares = shares_text(summary["shares"], summary.get("other_delegate_outside_ops"))
    # the emulated target's shares and coverage are of counted instructions; its time is the emulator's
    emulated_uncounted = summary.get("emulated") and summary.get("basis") != INSTRUCTIONS
    measure = (
        "counted instructions"
        if summary.get("basis") == INSTRUCTIONS
        else "emulator time (not time)"
        if emulated_uncounted
        else "time"
    )
    lines = [
        f"{summary['model']} {summary['recipe']} [{summary['variant']}]"
        + (f" (EMULATED: {EMULATED_NOTE})" if summary.get("emulated") else "")
        + cached_text(summary),
        f"  {size_text(summary)}{disturbed_text(summary)}",
        f"  shares of {measure} (medians over undisturbed runs): {shares}",
        "  delegation: "
        + (
            f"{pct(summary['node_delegation_coverage'])} of graph nodes (the program), "
            if summary.get("node_delegation_coverage") is not None
            else ""
        )
        + f"{pct(summary['delegation_coverage'])} of {measure} (this run);"
        f" {sme_path_label(summary.get('sme_path_basis'), bool(summary.get('emulated')))}:"
        f" {pct(summary['sme_path_share'])}"
        f" ({summary['sme_path_ops']} ops)"
        + (
            f"; {SME_INSTRUCTIONS_LABEL}: {pct(summary['instructions']['sme_share_of_conv_gemm'])}"
            if summary.get("instructions")
            else ""
        ),
    ]
    device = device_state_text(summary)
    if device is not None:
        lines.append(f"  {device}")
    ops = operator_shares(summary)
    if ops is None:
        lines.append(f"  {NO_OPERATOR_SHARES}")
    else:
        lines.append(f"  heaviest operators (share of {measure}):")
        for share, op in ops[:5]:
            lines.append(
                f"    {share:6.1%}  {op['event']}  [{op['category']}{'' if op['delegated'] else ', portable'}]"
            )
    kernels = kernel_time_text(summary.get("kernel_time"))
    if kernels:
        lines.append(f"  {kernels}")
    return "\n".join(lines)


def slowdown_text(comparison: Mapping[str, Any]) -> str | None:
    """The operators measured slower with SME2 on than off (op_pairs.py), or None where time was not measured."""
    slower = comparison.get("slower_with_sme2")
    if slower is None:
        return None
    if not slower:
        return "No operator is measurably slower with SME2 on (by 5% or more, 95% for all operators together)."
    named = "; ".join(
        f"{op['op']} ({op['category']}) {op['slowdown']['value']:.2f}x slower "
        f"[{op['slowdown']['low']:.2f}, {op['slowdown']['high']:.2f}], {op['off_ms'] * 1e3:.1f} -> "
        f"{op['on_ms'] * 1e3:.1f} us"
        for op in slower[:5]
    )
    return (
        f"{len(slower)} operator(s) slower with SME2 on than off (median on / off, bootstrap intervals above "
        f"1.05, 95% for all operators together): {named}" + ("; ..." if len(slower) > 5 else "")
    )


def entry_text(test_entry: Mapping[str, Any]) -> str:
    parts = [profile_text(p) for p in test_entry["profiles"]]
    for c in test_entry.get("comparisons", []):
        parts.append(
            f"SME2 on vs off ({program_title(c)}): speedup {speedup(c['speedup'], c['emulated'])}, "
            f"bottleneck {c['bottleneck_off']} -> {c['bottleneck_on']}"
        )
        slower = slowdown_text(c)
        if slower:
            parts.append(f"  {slower}")
    return "\n".join(parts)
