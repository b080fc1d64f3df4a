"""HTML for people: a test's section (pytest-html extra) and the session page (report.html).

Both render test entries (see entries.py), never Profiles, so ``pytest-sme2
report`` can rebuild them from summary.json. The output is self-contained:
charts are embedded ``data:`` images, styles are inline, there are no scripts
and no external URLs; artifact links are relative paths.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path, PureWindowsPath
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

from pytest_sme2.profile.profile_json import WORTH_DELEGATING
from pytest_sme2.report import charts
from pytest_sme2.report.advice import recommendations
from pytest_sme2.report.entries import EMULATED_NOTE, message_lines
from pytest_sme2.report.table import (
    SME_INSTRUCTIONS_LABEL,
    THREAD_SCALING_HEADERS,
    columns,
    comparison_category_rows,
    comparison_operator_rows,
    fewer,
    instructions,
    modelled_table,
    modelled_text,
    ms,
    pct,
    portable_table,
    program_title,
    sme_path_label,
    speedup,
    summary_rows,
    thread_scaling_rows,
)
from pytest_sme2.report.text import (
    KERNEL_TABLE_HEADERS,
    OUTSIDE_OPS_LABEL,
    cached_text,
    device_state_text,
    disturbed_cell,
    kernel_comparison_tables,
    kernel_comparison_text,
    kernel_rows_by_op,
    kernel_time_text,
    slowdown_text,
)

STYLE = """<style>
.sme2 {font-family: system-ui, sans-serif; font-size: 13px; color: #222}
.sme2 h2 {font-size: 18px; margin: 18px 0 6px}
.sme2 h3 {font-size: 15px; margin: 14px 0 4px}
.sme2 h4 {font-size: 13px; margin: 10px 0 4px}
.sme2 table {border-collapse: collapse; margin: 4px 0}
.sme2 td, .sme2 th {border: 1px solid #ccc; padding: 2px 6px; font-size: 12px; text-align: left}
.sme2 td {white-space: pre-wrap}  /* a regression's message keeps its lines: cause, what moved, how to update */
.sme2 th {background: #f3f3f3}
.sme2 img {display: block; max-width: 100%; margin: 4px 0}
.sme2 .emulated {background: #fff3cd; border: 1px solid #e0c36a; padding: 4px 8px; margin: 4px 0}
.sme2 .note {color: #555}
.sme2 .cause {background: #fdecea; border: 1px solid #e5a19a; padding: 4px 8px; margin: 4px 0}
.sme2 .cause pre {white-space: pre-wrap; font-size: 12px; margin: 2px 0}
.sme2 code {font-size: 11px}
</style>"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{_esc(alt)}">'


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# what a browser strips or ignores before reading a URL's scheme (C0 controls, space; tabs and
# newlines anywhere), so " java\tscript:" is found as the scheme it would be
_URL_IGNORED = re.compile(r"[\x00-\x20\x7f]")


def _link(path: str, base: Path | None) -> str:
    """An artifact as a link only when it is a file: a relative path (percent-encoded, so no part of
    it reads as a scheme) or a ``file:`` URL; a path with any other scheme (``javascript:``, ``data:``,
    ``https:``: a hand-edited summary.json) is shown as escaped text, never as a link."""
    raw = str(path)
    scheme = _SCHEME.match(_URL_IGNORED.sub("", raw))
    is_drive = scheme is not None and len(scheme.group(1)) == 1 and PureWindowsPath(raw).drive != ""
    if scheme is not None and not is_drive:
        if scheme.group(1).lower() == "file":
            href = _esc(quote(_URL_IGNORED.sub("", raw), safe=":/%#?=&~@!$,;+"))
            return f'<a href="{href}">{_esc(raw.rsplit("/", 1)[-1])}</a>'
        return f"<code>{_esc(raw)}</code> (not a file path: not linked)"
    target = raw
    if base is not None:
        try:
            target = os.path.relpath(raw, base)
        except ValueError:  # another drive (Windows)
            target = raw
    if Path(target).is_absolute() or is_drive:
        try:
            href = Path(target).as_uri()
        except ValueError:
            return f"<code>{_esc(raw)}</code>"
    else:
        href = quote(Path(target).as_posix(), safe="/")
    return f'<a href="{_esc(href)}">{_esc(Path(raw).name)}</a>'


def _latency_rows(profile: Mapping[str, Any]) -> list[list[Any]]:
    rows = []
    # (row name, summary, key suffix): relative latency is a ratio (stats.SampleStats.as_dict(unit="")).
    for name, lat, u in (
        ("E2E (Method::execute)", profile["latency"], "_ms"),
        ("wall clock (runner)", profile.get("wall_latency"), "_ms"),
        ("E2E / reference program (ratio, what the baseline gate compares)", profile.get("relative_latency"), ""),
    ):
        if lat:
            rows.append(
                [
                    profile["variant"],
                    name,
                    lat["n"],
                    ms(lat[f"median{u}"]),
                    f"[{ms(lat[f'median_ci_low{u}'])}, {ms(lat[f'median_ci_high{u}'])}]",
                    ms(lat[f"p10{u}"]),
                    ms(lat[f"p90{u}"]),
                    ms(lat[f"min{u}"]),
                    ms(lat[f"max{u}"]),
                    pct(lat["cv"]),
                ]
            )
    return rows


def _instruction_rows(profile: Mapping[str, Any]) -> list[list[Any]]:
    counted = profile.get("instructions")
    if not counted:
        return []
    return [
        [
            profile["variant"],
            instructions(counted["per_inference"]),
            instructions(counted["sme_per_inference"]),
            pct(counted["sme_share_of_conv_gemm"]),
            instructions(counted["load"]),
            instructions(counted["init"]),
        ]
    ]


def _counted_comparison_html(comparison: Mapping[str, Any]) -> str:
    """SME2 on vs off on the emulated target: counted instructions (exact), no time."""
    return "".join(
        [
            f"<h4>SME2 on vs off: {_esc(program_title(comparison))} (counted instructions)</h4>",
            f"<p>Instructions per inference: SME2 on needs <b>{_esc(fewer(comparison.get('fewer_instructions')))}</b>; "
            f"largest category {_esc(comparison['bottleneck_off'])} (off) &rarr; {_esc(comparison['bottleneck_on'])} "
            f"(on). {EMULATED_NOTE}: no speedup is shown.</p>",
            table(*comparison_category_rows(comparison, ("off", "on"))),
            _img(charts.operator_chart(comparison), "top operators by share of instructions, SME2 off vs on"),
            table(*comparison_operator_rows(comparison, ("off", "on"), "operator ({})", category=True)),
            _modelled_html(comparison.get("modelled")),
        ]
    )


def _modelled_html(modelled: Mapping[str, Any] | None) -> str:
    """The comparison's modelled device time (--sme2-device), labelled as a model."""
    if not modelled:
        return ""
    headers, rows = modelled_table(modelled)
    return f"<p>{_esc(modelled_text(modelled))}</p>" + (table(headers, rows) if rows else "")


def _comparison_html(comparison: Mapping[str, Any]) -> str:
    if comparison.get("unit") == "instructions":
        return _counted_comparison_html(comparison)
    emulated = comparison["emulated"]
    parts = [
        f"<h4>SME2 on vs off: {_esc(program_title(comparison))}</h4>",
        f"<p>E2E speedup (median off / median on, 95% bootstrap CI): "
        f"<b>{_esc(speedup(comparison['speedup'], emulated))}"
        f"</b>; bottleneck {_esc(comparison['bottleneck_off'])} (off) &rarr; "
        f"{_esc(comparison['bottleneck_on'])} (on)</p>",
        # an uncounted emulated pair: shares of emulator time only, no ms and no speedup columns
        table(*comparison_category_rows(comparison, ("off", "on"), timed=not emulated)),
        _img(charts.operator_chart(comparison), "top operators by share of E2E, SME2 off vs on"),
        table(*comparison_operator_rows(comparison, ("off", "on"), "operator ({})", category=True, timed=not emulated)),
    ]
    if slowdown_text(comparison):
        parts.append(f'<p class="sme2-slowdowns">{_esc(slowdown_text(comparison))}</p>')
    kernels = comparison.get("kernels")
    if kernels:
        parts.append(f"<p>{_esc(kernel_comparison_text(kernels))}</p>")
        parts += [table(headers, rows) for headers, rows in kernel_comparison_tables(kernels)]
    return "".join(parts)


# The program's delegation first: a share of graph nodes is the same whatever runs it; a share of a run's time or
# instructions moves with the kernels that ran (SME2 on and off read 18.6% and 37.1% for one program).
NODES_HEADER = "delegated (graph nodes: the program)"


def _delegation_table(profile: Mapping[str, Any]) -> str:
    """The one-row table of how much of the program ran delegated and on the SME path, in the profile's basis."""
    basis = profile.get("basis", "time")
    sme_path = sme_path_label(profile.get("sme_path_basis"), bool(profile.get("emulated")))
    if basis == "instructions":
        header = [NODES_HEADER, "delegated (share of the run's instructions)", sme_path, "SME-path operators"]
        row = [
            pct(profile["node_delegation_coverage"]),
            pct(profile["delegation_coverage"]),
            pct(profile["sme_path_share"]),
            profile["sme_path_ops"],
        ]
    else:
        emulated = bool(profile.get("emulated"))  # no instruction counts: its only measure is the emulator's time
        header = [
            NODES_HEADER,
            f"delegated (share of the run's {'emulator time, not time' if emulated else 'time'})",
            sme_path,
            "SME-path operators",
            "load ms",
            "init ms",
            "runs disturbed (left out)",
        ]
        row = [
            pct(profile["node_delegation_coverage"]),
            pct(profile["delegation_coverage"]),
            pct(profile["sme_path_share"]),
            profile["sme_path_ops"],
            "n/a (emulated)" if emulated else ms(profile["load_ms"]),
            "n/a (emulated)" if emulated else ms(profile["init_ms"]),
            disturbed_cell(profile),
        ]
    return table(header, [row])


def _kernels_html(profile: Mapping[str, Any], basis: str) -> list[str]:
    """The CONV/GEMM kernels, the SME kernels a trace saw execute and the sampled kernel time, each when present."""
    parts: list[str] = []
    kernels = profile.get("kernels", [])
    if kernels:
        parts.append(
            table(
                [
                    "CONV/GEMM kernel",
                    "category",
                    "SME/SME2 (packed format)",
                    "instances",
                    "share of E2E" + (" instructions" if basis == "instructions" else ""),
                ],
                [
                    [k["op"], k["category"], "yes" if k["packed"] else "no", k["instances"], pct(k["share"])]
                    for k in kernels
                ],
            )
        )
    executed = profile.get("executed_sme_kernels")
    if executed is not None:
        parts.append(
            f"<p>Kernel trace: {len(executed)} SME/SME2 kernel(s) executed"
            + (
                ": " + ", ".join(f"<code>{_esc(k)}</code>" for k in executed)
                if executed
                else " (none: this variant ran no SME code)"
            )
            + "</p>"
        )
    kernel_time = profile.get("kernel_time")
    if kernel_time:
        parts.append(
            f"<h4>{_esc(profile['variant'])}: kernel time (sampled)</h4><p>{_esc(kernel_time_text(kernel_time))}</p>"
        )
        if kernel_time.get("available"):
            parts.append(table(KERNEL_TABLE_HEADERS, kernel_rows_by_op(kernel_time)))
    return parts


def _portable_html(profile: Mapping[str, Any], basis: str) -> str:
    """The operators no delegate took, with what this profile measured of them (instructions, time or neither)."""
    portable = profile.get("portable_ops", [])
    if not portable:
        return "<p>Portable operators: none, every operator ran in a delegate.</p>"
    names = ("portable operator", f"worth delegating (> {WORTH_DELEGATING:.0%})")
    worth = set(profile.get("worth_delegating", []))
    return table(*portable_table(portable, worth, names, basis == "instructions", bool(profile.get("emulated"))))


def _profile_details_html(profile: Mapping[str, Any], base: Path | None) -> str:
    basis = profile.get("basis", "time")
    parts = [
        f"<h4>{_esc(profile['variant'])}: delegation and SME kernel path{_esc(cached_text(profile))}</h4>",
        _delegation_table(profile),
    ]
    device = device_state_text(profile)
    if device:  # governors, temperatures and throttling of the device it ran on (device_state.py)
        parts.append(f'<p class="sme2-device">{_esc(device)}</p>')
    parts += _kernels_html(profile, basis)
    parts.append(_portable_html(profile, basis))
    if profile.get("unclassified_ops"):
        parts.append(f"<p>Unclassified (counted as OTHER): {_esc(', '.join(profile['unclassified_ops']))}</p>")
    artifacts = profile.get("artifacts") or {}
    if artifacts:
        parts.append("<p>Artifacts: " + ", ".join(f"{_esc(k)} {_link(v, base)}" for k, v in artifacts.items()) + "</p>")
    return "".join(parts)


def _verdicts_html(verdicts: Sequence[Mapping[str, Any]]) -> str:
    if not verdicts:
        return "<p>Baseline: no baseline check.</p>"
    keys = list(dict.fromkeys(k for v in verdicts for k in v))
    return "<h4>Baseline comparison</h4>" + table(keys, [[v.get(k, "") for k in keys] for v in verdicts])


def _cause_html(test_entry: Mapping[str, Any], advice: Sequence[str]) -> str:
    """A failed test's section opens on why: the gate's regressions as the terminal gives them (the headline, what
    moved, how to update), the variants without a baseline, and the advice that follows, before any table or
    chart (issue 65: the headline sat about 2,500 px down, under the charts). Empty for a test that passed."""
    verdicts = test_entry.get("verdicts", [])
    regressions = [v for v in verdicts if v.get("verdict") == "regression"]
    missing = [v for v in verdicts if v.get("verdict") in ("no baseline", "baseline not written")]
    failed = str(test_entry.get("outcome", "passed")) not in ("passed", "skipped")
    if not regressions and not (failed and missing):
        return ""
    parts = ['<div class="cause">']
    for verdict in regressions:
        lines = message_lines(verdict)
        if lines:
            parts.append(f"<p><b>{_esc(lines[0])}</b></p>")
            if lines[1:]:
                parts.append(f"<pre>{_esc(chr(10).join(lines[1:]))}</pre>")
    for verdict in missing if failed else []:
        parts.append(f"<p>{_esc(verdict['verdict'])}: {_esc(verdict.get('message', ''))}</p>")
    if advice:
        parts.append("<h4>What to do</h4><ul>" + "".join(f"<li>{_esc(a)}</li>" for a in advice) + "</ul>")
    parts.append("</div>")
    return "".join(parts)


def entry_html(test_entry: Mapping[str, Any], base: Path | None = None) -> str:
    """One test's section: charts, comparisons, per-variant details, verdicts and artifact links."""
    profiles = test_entry["profiles"]
    if not profiles:
        return ""
    parts = ['<div class="sme2">']
    advice = recommendations(test_entry)
    cause = _cause_html(test_entry, advice)
    parts.append(cause)
    # Emulated time is not time: an emulated run without instruction counts gets no latency table and no chart.
    timed = [p for p in profiles if p.get("basis", "time") == "time" and not p.get("emulated")]
    counted = [p for p in profiles if p.get("basis") == "instructions"]
    if any(p.get("emulated") for p in profiles):
        parts.append(
            f'<div class="emulated">EMULATED target: kernels, SME path, outputs and instruction counts are '
            f"real and exact; time is the emulator's ({EMULATED_NOTE}), so shares, coverage and SME path "
            f"here are shares of counted instructions and no latency or speedup is shown.</div>"
        )
    if counted:
        parts.append("<h4>Instructions per inference (counted under emulation, exact)</h4>")
        parts.append(
            table(
                ["variant", "instructions", "SME instructions", SME_INSTRUCTIONS_LABEL, "load", "init"],
                [row for p in counted for row in _instruction_rows(p)],
            )
        )
    if timed:
        parts.append("<h4>Latency per run</h4>")
        parts.append(
            table(
                ["variant", "latency", "runs", "median ms", "95% CI", "p10", "p90", "min", "max", "CV"],
                [row for p in timed for row in _latency_rows(p)],
            )
        )
        parts.append(_img(charts.latency_chart(timed), "per-run latency of each variant"))
    for group, title in ((timed, "Where time went"), (counted, "Where the instructions went")):
        if group:
            parts.append(f"<h4>{title}</h4>")
            parts.append(
                table(
                    ["variant", *group[0]["shares"], f"of OTHER: {OUTSIDE_OPS_LABEL}"],
                    [
                        [
                            p["variant"],
                            *(pct(v) for v in p["shares"].values()),
                            pct(p.get("other_delegate_outside_ops")),
                        ]
                        for p in group
                    ],
                )
            )
            parts.append(_img(charts.category_chart(group), f"{title.lower()}, per operator category"))
    scaling = thread_scaling_rows(test_entry)
    if scaling:
        parts.append("<h4>SME2 speedup by threads</h4>")
        parts.append(table(THREAD_SCALING_HEADERS, scaling))
        parts.append(
            _img(
                charts.thread_scaling_chart([c for c in test_entry["comparisons"] if c.get("speedup")]),
                "SME2 speedup by thread count",
            )
        )
    for comparison in test_entry.get("comparisons", []):
        parts.append(_comparison_html(comparison))
    if not test_entry.get("comparisons"):
        parts.append("<h4>Top operators</h4>")
        for profile in timed + counted:  # an emulated run without counts has no measure to rank them by
            parts.append(_img(charts.top_ops_chart(profile), f"top operators of {profile['variant']}"))
    for profile in profiles:
        parts.append(_profile_details_html(profile, base))
    if advice and not cause:  # a failed test's advice is shown first, beside its cause
        parts.append("<h4>Recommendations</h4><ul>" + "".join(f"<li>{_esc(a)}</li>" for a in advice) + "</ul>")
    if test_entry.get("timeline"):
        parts.append(
            f"<p>Timeline: {_link(test_entry['timeline'], base)} (open it in ui.perfetto.dev or "
            f"chrome://tracing: runs, delegate calls and operators, each variant a process)</p>"
        )
    parts.append(_verdicts_html(test_entry.get("verdicts", [])))
    parts.append("</div>")
    return "".join(parts)


def extra_html(test_entry: Mapping[str, Any], base: Path | None = None) -> str:
    """The pytest-html extra of one test (its own style block, since extras are inserted as-is)."""
    return STYLE + entry_html(test_entry, base)


def session_html(summary: Mapping[str, Any]) -> str:
    """The whole session as one self-contained page (report.html in the session folder)."""
    base = Path(summary["session_dir"]) if summary.get("session_dir") else None
    test_entries = summary["tests"]
    target = summary.get("target") or {}
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>pytest-sme2 report</title>",
        STYLE,
        '</head><body class="sme2">',
        "<h2>pytest-sme2 session report</h2>",
        f"<p class=\"note\">created {_esc(summary.get('created', '?'))}; target {_esc(target.get('name', '?'))}"
        f" ({_esc(target.get('cpu', '?'))}, SME2 {'yes' if target.get('has_sme2') else 'no'}"
        f"{', EMULATED' if target.get('emulated') else ''}); {len(test_entries)} perf test(s)</p>",
        table(columns(test_entries), summary_rows(test_entries, with_cause=True)),
    ]
    for test_entry in test_entries:
        parts.append(f"<h3>{_esc(test_entry['nodeid'])}: {_esc(test_entry.get('outcome', '?'))}</h3>")
        parts.append(entry_html(test_entry, base))
    parts.append("</body></html>")
    return "".join(parts)


def pytest_html_summary(test_entries: Sequence[Mapping[str, Any]], session_report: Path, base: Path) -> str:
    """The block at the top of a pytest-html page: every perf test in one table, and where the rest is.

    pytest-html opens with passed tests collapsed, so without this a page of passing perf tests shows none
    of the plugin's numbers until "Show all details" is clicked."""
    where = f"the whole session in one page, with every chart: {_link(str(session_report), base)}"
    return (
        STYLE
        + '<div class="sme2"><h2>pytest-sme2: performance summary</h2>'
        + table(columns(test_entries), summary_rows(test_entries, with_cause=True))
        + f'<p class="note">Each perf test\'s own section (charts, operators, verdicts) is in its row of the '
        f'results below: passed tests open collapsed ("Show all details", or <code>render_collapsed = '
        f"failed</code> in your pytest ini to open them); {where}.</p></div>"
    )
