"""Render Profile summaries for people: an HTML section for pytest-html and a
plain-text section for the terminal. Both take the JSON summaries (not
Profile objects), so they work on data that crossed an xdist boundary or was
read back from disk.
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Mapping

_CATEGORY_COLOURS = {
    "CONV": "#4e79a7",
    "GEMM": "#f28e2b",
    "DATA_MOVEMENT": "#e15759",
    "ELEMENTWISE": "#76b7b2",
    "OTHER": "#bab0ac",
}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _table(headers: list[str], rows: Iterable[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="sme2"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _share_bar(shares: Mapping[str, float]) -> str:
    parts = []
    for name, share in shares.items():
        width = max(0.0, share) * 100
        colour = _CATEGORY_COLOURS.get(name, "#999")
        parts.append(
            f'<span title="{html.escape(name)} {share:.1%}" '
            f'style="display:inline-block;height:14px;width:{width:.2f}%;background:{colour}"></span>'
        )
    legend = " ".join(
        f'<span style="color:{_CATEGORY_COLOURS.get(n, "#999")}">&#9632;</span> {html.escape(n)} {s:.1%}'
        for n, s in shares.items()
    )
    return f'<div style="width:600px;border:1px solid #ccc;font-size:0">{"".join(parts)}</div><div>{legend}</div>'


def profile_html(summary: Mapping[str, Any]) -> str:
    lat = summary["latency"]
    wall = summary.get("wall_latency")
    title = f"{summary['model']} {summary['recipe']} [{summary['variant']}]"
    if summary.get("emulated"):
        title += " - EMULATED: kernels and outputs are real, times are not hardware timing"
    latency_rows = [
        ["E2E (Method::execute)", lat["n"], _ms(lat["median_ms"]),
         f"[{_ms(lat['median_ci_low_ms'])}, {_ms(lat['median_ci_high_ms'])}]",
         _ms(lat["p10_ms"]), _ms(lat["p90_ms"]), _ms(lat["min_ms"]), _ms(lat["max_ms"]), f"{lat['cv']:.1%}"],
    ]
    if wall:
        latency_rows.append(
            ["wall clock (runner)", wall["n"], _ms(wall["median_ms"]),
             f"[{_ms(wall['median_ci_low_ms'])}, {_ms(wall['median_ci_high_ms'])}]",
             _ms(wall["p10_ms"]), _ms(wall["p90_ms"]), _ms(wall["min_ms"]), _ms(wall["max_ms"]), f"{wall['cv']:.1%}"]
        )
    parts = [
        f"<h3>{html.escape(title)}</h3>",
        _table(["latency (ms)", "runs", "median", "95% CI", "p10", "p90", "min", "max", "CV"], latency_rows),
        f"<p>load {_ms(summary['load_ms'])} ms, init {_ms(summary['init_ms'])} ms</p>",
        "<h4>Where time went (share of E2E)</h4>",
        _share_bar(summary["shares"]),
        "<h4>Delegation and SME path</h4>",
        _table(
            ["delegation by time", "delegation by nodes", "SME path share of CONV+GEMM", "SME-path operators"],
            [[_pct(summary["delegation_coverage"]), _pct(summary["node_delegation_coverage"]),
              _pct(summary["sme_path_share"]), summary["sme_path_ops"]]],
        ),
        "<h4>Top operators</h4>",
        _table(
            ["operator", "category", "delegated", "packed (SME)", "median ms", "share of E2E"],
            [[op["event"], op["category"], op["delegated"], op["packed"], _ms(op["median_ms"]), _pct(op["share"])]
             for op in summary["top_ops"]],
        ),
        "<h4>Portable (non-delegated) operators</h4>",
        _table(
            ["operator", "count", "category", "ms per run", "share of E2E"],
            [[op["op"], op["count"], op["category"], _ms(op["median_ms_per_run"]), _pct(op["share"])]
             for op in summary["portable_ops"]],
        )
        if summary["portable_ops"]
        else "<p>none: every operator ran in a delegate</p>",
    ]
    if summary.get("unclassified_ops"):
        parts.append(f"<p>Unclassified (counted as OTHER): {html.escape(', '.join(summary['unclassified_ops']))}</p>")
    if summary.get("artifacts"):
        parts.append(
            "<p>Artifacts: " + ", ".join(f"{html.escape(k)}: <code>{html.escape(v)}</code>"
                                          for k, v in summary["artifacts"].items()) + "</p>"
        )
    return '<div class="sme2-profile">' + "".join(parts) + "</div>"


def profiles_html(summaries: list[Mapping[str, Any]]) -> str:
    style = (
        "<style>table.sme2{border-collapse:collapse;margin:4px 0}"
        "table.sme2 td,table.sme2 th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style>"
    )
    return style + "".join(profile_html(s) for s in summaries)


def profile_text(summary: Mapping[str, Any]) -> str:
    lat = summary["latency"]
    shares = ", ".join(f"{k} {v:.1%}" for k, v in summary["shares"].items())
    lines = [
        f"{summary['model']} {summary['recipe']} [{summary['variant']}]"
        + (" (EMULATED: times are not hardware timing)" if summary.get("emulated") else ""),
        f"  E2E median {lat['median_ms']:.3f} ms (95% CI {lat['median_ci_low_ms']:.3f}-{lat['median_ci_high_ms']:.3f}),"
        f" p10 {lat['p10_ms']:.3f}, p90 {lat['p90_ms']:.3f}, CV {lat['cv']:.1%}, {lat['n']} runs",
        f"  shares: {shares}",
        f"  delegation: {_pct(summary['delegation_coverage'])} of time, {_pct(summary['node_delegation_coverage'])} of nodes;"
        f" SME path: {_pct(summary['sme_path_share'])} of CONV+GEMM ({summary['sme_path_ops']} ops)",
    ]
    for op in summary["top_ops"][:5]:
        lines.append(f"    {op['share']:6.1%}  {op['event']}  [{op['category']}{'' if op['delegated'] else ', portable'}]")
    return "\n".join(lines)
