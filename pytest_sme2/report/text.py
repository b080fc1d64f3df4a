"""Plain-text digest of a test record: the "sme2 profiles" section pytest shows for a failing test."""

from __future__ import annotations

from typing import Any, Mapping

from .record import EMULATED_NOTE
from .table import pct, speedup


def disturbed_text(summary: Mapping[str, Any]) -> str:
    """", 3 disturbed by the machine (left out)" or nothing: every report says how many runs were disturbed."""
    runs, refs = summary.get("disturbed_runs") or 0, summary.get("disturbed_references") or 0
    if not runs and not refs:
        return ""
    parts = [f"{runs} disturbed by the machine"] if runs else []
    parts += [f"{refs} after a disturbed reference run"] if refs else []
    return f" ({', '.join(parts)}: left out of verdicts)"


def profile_text(summary: Mapping[str, Any]) -> str:
    lat = summary["latency"]
    shares = ", ".join(f"{k} {v:.1%}" for k, v in summary["shares"].items())
    lines = [
        f"{summary['model']} {summary['recipe']} [{summary['variant']}]"
        + (f" (EMULATED: {EMULATED_NOTE})" if summary.get("emulated") else ""),
        f"  E2E median {lat['median_ms']:.3f} ms (95% CI {lat['median_ci_low_ms']:.3f}-{lat['median_ci_high_ms']:.3f}),"
        f" p10 {lat['p10_ms']:.3f}, p90 {lat['p90_ms']:.3f}, CV {lat['cv']:.1%}, {lat['n']} runs"
        f"{disturbed_text(summary)}",
        f"  shares (medians over undisturbed runs): {shares}",
        f"  delegation: {pct(summary['delegation_coverage'])} of time, {pct(summary['node_delegation_coverage'])} of nodes;"
        f" SME path: {pct(summary['sme_path_share'])} of CONV+GEMM ({summary['sme_path_ops']} ops)",
    ]
    for op in summary["top_ops"][:5]:
        lines.append(f"    {op['share']:6.1%}  {op['event']}  [{op['category']}{'' if op['delegated'] else ', portable'}]")
    return "\n".join(lines)


def record_text(record: Mapping[str, Any]) -> str:
    parts = [profile_text(p) for p in record["profiles"]]
    for c in record.get("comparisons", []):
        parts.append(f"SME2 on vs off ({c['model']} {c['recipe']}): speedup {speedup(c['speedup'], c['emulated'])}, "
                     f"bottleneck {c['bottleneck_off']} -> {c['bottleneck_on']}")
    return "\n".join(parts)
