"""One report across targets: sessions of the same perf tests on different targets, side by side.

Like the reference kit's combined report (Mac and Android runs side by side), from
pytest-sme2 session folders (``summary.json``) of any targets: host, local, adb devices,
the emulated target. Per test and variant each target's numbers stand in one row: a
hardware target's median latency and SME2 speedup with its interval; the emulated
target's counted instructions and how many fewer SME2 on needs, never its time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_sme2.errors import UsageError
from pytest_sme2.evidence.categories import Category
from pytest_sme2.report.charts import target_share_chart
from pytest_sme2.report.escape import code, text
from pytest_sme2.report.html import STYLE, _esc, table
from pytest_sme2.report.summary import load_summary
from pytest_sme2.report.table import amount, comparison_cell, markdown_table, pct
from pytest_sme2.system.safe_files import write_file

COMBINED_MD = "combined.md"
COMBINED_HTML = "combined.html"


def target_label(summary: Mapping[str, Any]) -> str:
    """``adb:SERIAL (Pixel 9, SME2)``: a target as a column header."""
    target = summary.get("target") or {}
    details = target.get("details") or {}
    what = details.get("device_model") or target.get("cpu", "?")
    flags = ["SME2" if target.get("has_sme2") else "no SME2"] + (["EMULATED"] if target.get("emulated") else [])
    return f"{target.get('name', '?')} ({what}, {', '.join(flags)})"


def _variant_key(profile: Mapping[str, Any]) -> str:
    """The variant without its target kind (``host sme2=on threads=1`` -> ``sme2=on threads=1``)."""
    return profile["variant"].split(" ", 1)[-1]


def versions_of(summary: Mapping[str, Any]) -> str:
    """``executorch 1.5.1+cpu, torch 2.14.1+cu130``: what the session's programs were exported with (each profile's
    export metadata; several pairs are listed in order), or "" when no profile says."""
    pairs = {
        (export.get("executorch"), export.get("torch")): None
        for test_entry in summary.get("tests", [])
        for profile in test_entry.get("profiles", [])
        for export in [(profile.get("metadata") or {}).get("export") or {}]
        if export.get("executorch") or export.get("torch")
    }
    return "; ".join(f"executorch {executorch or '?'}, torch {torch or '?'}" for executorch, torch in pairs)


def combine(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Tests x variants x targets from several sessions' summaries (the data both renderings read). Sessions whose
    executorch or torch differ carry the versions in their column's name: an upgrade shown side by side (issue 66)."""
    labels = [target_label(s) for s in summaries]
    versions = [versions_of(s) for s in summaries]
    if len(set(versions)) > 1:
        labels = [f"{label} [{version or 'versions unknown'}]" for label, version in zip(labels, versions)]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):  # the same target twice (two sessions): number them
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} #{seen[label]}"
    tests: dict[str, dict[str, Any]] = {}
    for label, summary in zip(labels, summaries):
        for test_entry in summary["tests"]:
            nodeid = test_entry["nodeid"]
            test = tests.setdefault(nodeid, {"nodeid": nodeid, "variants": {}, "comparisons": {}})
            for profile in test_entry["profiles"]:
                test["variants"].setdefault(_variant_key(profile), {})[label] = profile
            for comparison in test_entry.get("comparisons", []):
                test["comparisons"][label] = comparison
    for test in tests.values():  # a target whose session has no profile of the test: skipped there, or not run
        ran = {t for per in test["variants"].values() for t in per}
        test["absent"] = [label for label in labels if label not in ran]
    return {
        "targets": labels,
        "sessions": [str(s.get("session_dir", "?")) for s in summaries],
        "tests": list(tests.values()),
        "emulated": any((s.get("target") or {}).get("emulated") for s in summaries),
    }


EMULATED_NOTE = (
    "Emulated targets show counted instructions and their shares, never time: emulated timing is not "
    "hardware timing."
)


def _absent_text(test: Mapping[str, Any]) -> str:
    absent = test.get("absent") or []
    return (
        (
            f"No profile on {', '.join(absent)}: the test was skipped there (its session's pytest output says why) "
            "or not run in that session."
        )
        if absent
        else ""
    )


def _amount(profile: Mapping[str, Any]) -> str:
    text = amount(profile)
    return text if text.endswith("instr") or profile.get("emulated") else f"{text} ms"


def _test_tables(test: Mapping[str, Any], targets: Sequence[str]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of one test: per variant each target's amount, the SME2 comparison per target,
    and per variant the category shares per target."""
    present = [t for t in targets if any(t in per for per in test["variants"].values())]
    tables = []
    rows = [
        [variant, *(_amount(per[t]) if t in per else "-" for t in present)] for variant, per in test["variants"].items()
    ]
    if test["comparisons"]:
        rows.append(
            [
                "SME2 on vs off",
                *(comparison_cell(test["comparisons"][t]) if t in test["comparisons"] else "-" for t in present),
            ]
        )
    tables.append(
        ("median latency (hardware) or counted instructions (emulated) per target", ["variant", *present], rows)
    )
    for variant, per in test["variants"].items():
        shares = [
            [c.value, *(pct((per[t].get("shares") or {}).get(c.value)) if t in per else "-" for t in present)]
            for c in Category
        ]
        shares.append(["delegated", *(pct(per[t].get("delegation_coverage")) if t in per else "-" for t in present)])
        shares.append(
            ["SME path of CONV+GEMM", *(pct(per[t].get("sme_path_share")) if t in per else "-" for t in present)]
        )
        tables.append(
            (
                f"{variant}: shares (of time on hardware, of counted instructions where emulated)",
                ["category", *present],
                shares,
            )
        )
    return tables


def combined_markdown(combined: Mapping[str, Any]) -> str:
    lines = [
        "## pytest-sme2: SME2 performance across targets",
        "",
        f"{len(combined['targets'])} sessions: "
        + "; ".join(f"{text(t)} ({code(s)})" for t, s in zip(combined["targets"], combined["sessions"])),
    ]
    lines += ["", f"> {EMULATED_NOTE}"] if combined.get("emulated") else []
    for test in combined["tests"]:
        absent = _absent_text(test)
        lines += ["", f"### {code(test['nodeid'])}"] + (["", text(absent)] if absent else [])
        for title, headers, rows in _test_tables(test, combined["targets"]):
            lines += ["", f"{text(title)}:", ""] + markdown_table(headers, rows)
    return "\n".join(lines) + "\n"


def combined_html(combined: Mapping[str, Any]) -> str:
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>pytest-sme2 report across targets</title>",
        STYLE,
        '</head><body class="sme2">',
        "<h2>pytest-sme2: SME2 performance across targets</h2>",
        table(["target", "session"], list(zip(combined["targets"], combined["sessions"]))),
    ]
    parts += [f'<div class="emulated">{_esc(EMULATED_NOTE)}</div>'] if combined.get("emulated") else []
    for test in combined["tests"]:
        absent = _absent_text(test)
        parts.append(f"<h3>{_esc(test['nodeid'])}</h3>" + (f'<p class="note">{_esc(absent)}</p>' if absent else ""))
        for title, headers, rows in _test_tables(test, combined["targets"]):
            parts.append(f"<h4>{_esc(title)}</h4>{table(headers, rows)}")
        for variant, per in test["variants"].items():
            columns = [(target, per[target]) for target in combined["targets"] if target in per]
            if columns and all(profile.get("shares") for _, profile in columns):
                chart = target_share_chart(f"{variant}: category shares per target", columns)
                parts.append(f'<img alt="category shares of {_esc(variant)} per target" src="{chart}">')
    parts.append("</body></html>")
    return "".join(parts)


def write_combined(directories: Sequence[Path], out_dir: Path) -> dict[str, Path]:
    """``combined.md`` and ``combined.html`` of the sessions in ``directories`` (each a session folder)."""
    resolved = [Path(d).resolve() for d in directories]
    twice = next((d for d, r in zip(directories, resolved) if resolved.count(r) > 1), None)
    if twice is not None:  # it would read as two targets agreeing perfectly
        raise UsageError(f"session {twice} is given twice; give each session folder once")
    combined = combine([load_summary(Path(d)) for d in directories])
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        markdown = out_dir / COMBINED_MD
        write_file(markdown, combined_markdown(combined))
        page = out_dir / COMBINED_HTML
        write_file(page, combined_html(combined))
    except OSError as exc:
        raise UsageError(
            f"cannot write the combined report into {out_dir} ({exc.strerror or exc}); pass --out a "
            "folder you can write"
        ) from None
    return {"markdown": markdown, "html": page}


def sessions_in(root: Path) -> list[Path]:
    """Session folders (with a summary.json) directly under an artifacts folder, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob("session-*/summary.json"))


def session_target(session: Path) -> str:
    """A listed session's target and test count (``host (AMD EPYC, no SME2), 3 tests``), or why it is unreadable."""
    try:
        summary = load_summary(session)
    except UsageError as exc:
        return f"(unreadable: {exc})"
    return f"{target_label(summary)}, {len(summary.get('tests', []))} tests"
