"""``pytest-sme2 history``: a history file drawn as one self-contained page, with its change points listed."""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.errors import UsageError
from pytest_sme2.gate import history
from pytest_sme2.profile import stats
from pytest_sme2.report import charts
from pytest_sme2.report.escape import code, text
from pytest_sme2.report.html import STYLE, _esc, _img, table
from pytest_sme2.report.table import markdown_table
from pytest_sme2.system.safe_files import write_file

HISTORY_HTML = "history.html"
HISTORY_MD = "history.md"
# The series drawn for every (test, variant, target) even without a change: the size of one inference.
_PRIMARY = ("relative_latency", "median_ms", "instructions_per_inference")


def _change_rows(found: list[history.Change]) -> list[list[str]]:
    return [
        [
            c.test,
            c.variant,
            c.target,
            c.quantity,
            f"{c.before:.6g}",
            f"{c.after:.6g}",
            c.session,
            (c.commit or "?")[:12],
        ]
        for c in found
    ]


_CHANGE_HEADERS = ["test", "variant", "target", "quantity", "before", "after", "from session", "commit"]


def write_history_report(path: Path, out_dir: Path) -> tuple[dict[str, Path], list[history.Change], str]:
    damaged: list[int] = []
    rows = history.load(path, damaged)
    if not rows and damaged:
        raise UsageError(
            f"history {path} has no usable line: lines {_numbers(damaged)} are damaged (not JSON, "
            "nested too deeply, or not pytest-sme2 history lines)"
        )
    if not rows:
        raise UsageError(f"history {path} has no lines yet; sessions append to it with --sme2-history {path}")
    dropped: list[str] = []
    all_series = history.series(rows, dropped)
    found = history.changes(rows)
    notes = []
    if damaged:
        notes.append(
            f"Skipped {len(damaged)} damaged line(s) of {path}: line(s) {_numbers(damaged)} (not JSON, "
            "nested too deeply, or not pytest-sme2 history lines); the other lines are analysed."
        )
    if dropped:
        notes.append(
            f"Left out {len(dropped)} non-finite value(s) (NaN or infinite: a broken run): "
            + "; ".join(dropped[:5])
            + (f"; and {len(dropped) - 5} more" if len(dropped) > 5 else "")
            + "."
        )
    short = " ".join(notes + ([too_short(all_series)] if too_short(all_series) else []))
    changed = {(c.test, c.variant, c.target, c.quantity) for c in found}
    sessions = sorted({str(r["session"]) for r in rows})
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>pytest-sme2 history</title>',
        STYLE,
        '</head><body class="sme2"><h2>pytest-sme2 history</h2>',
        f'<p class="note">{_esc(path)}: {len(rows)} lines from {len(sessions)} sessions. A change point '
        f"is where a new level begins: the two-sided Mann-Whitney U test on the sessions before and after it "
        f"(p &lt; {stats.CHANGE_ALPHA}, at least {stats.CHANGE_MIN_SEGMENT} sessions a side, binary "
        "segmentation) and a change of the median beyond the quantity's smallest effect.</p>",
        "<h3>Change points</h3>",
        table(_CHANGE_HEADERS, _change_rows(found)) if found else "<p>None.</p>",
    ]
    if short:
        parts.append(f'<p class="note">{_esc(short)}</p>')
    drawn: dict[tuple[str, str, str], list[str]] = {}
    for key, points in all_series.items():
        test, variant, target, quantity = key
        primary = next((q for q in _PRIMARY if (test, variant, target, q) in all_series), None)
        if len(points) < 2 or (quantity != primary and key not in changed):
            continue
        values = [value for _, value in points]
        labels = [str(row["session"]) for row, _ in points]
        relative, effect = history.QUANTITIES.get(quantity, (True, 0.05))
        cuts = stats.change_points(values, min_effect=effect, relative=relative)
        drawn.setdefault((test, variant, target), []).append(
            _img(
                charts.history_chart(f"{variant} on {target}", quantity, values, labels, cuts),
                f"{test} {variant} {quantity} over sessions",
            )
        )
    for (test, variant, target), images in drawn.items():
        parts.append(f"<h3>{_esc(test)}</h3><h4>{_esc(variant)} on {_esc(target)}</h4>" + "".join(images))
    parts.append("</body></html>")
    markdown = [f"## pytest-sme2 history: {len(sessions)} sessions", "", f"{code(path)}, {len(rows)} lines.", ""]
    markdown += markdown_table(_CHANGE_HEADERS, _change_rows(found)) if found else ["No change points."]
    markdown += ["", text(short)] if short else []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        page, summary_md = out_dir / HISTORY_HTML, out_dir / HISTORY_MD
        write_file(page, "".join(parts))
        write_file(summary_md, "\n".join(markdown) + "\n")
    except OSError as exc:
        raise UsageError(
            f"cannot write the history report into {out_dir} ({exc.strerror or exc}); pass --out a "
            "folder you can write"
        ) from None
    return {"html": page, "markdown": summary_md}, found, short


def _numbers(lines: list[int], shown: int = 20) -> str:
    return ", ".join(map(str, lines[:shown])) + (f" and {len(lines) - shown} more" if len(lines) > shown else "")


def too_short(all_series: dict[tuple[str, str, str, str], list]) -> str:
    """Which series are too short for any change point yet, so "no change points" is not read as "stable"."""
    need = 2 * stats.CHANGE_MIN_SEGMENT
    short = [points for points in all_series.values() if len(points) < need]
    if not short:
        return ""
    return (
        f"{len(short)} of {len(all_series)} series have fewer than {need} sessions (the shortest "
        f"{min(len(points) for points in short)}): a change point needs {stats.CHANGE_MIN_SEGMENT} sessions on "
        "each side, so none can be found in them yet."
    )


def history_lines(found: list[history.Change], short: str = "") -> list[str]:
    if found:
        return [str(change) for change in found] + ([f"note: {short}"] if short else [])
    return ["no change points" + (f" ({short})" if short else "")]
