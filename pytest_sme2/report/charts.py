"""Charts of a test entry as self-contained ``data:`` PNG URIs (matplotlib, Agg backend).

Three charts answer the three questions a perf report gets asked: how noisy
and how far apart are the variants (per-run E2E of each), where did the time
go and how did the bottleneck shift (category bars, SME2 off vs on), and which
operators matter (top operators by share of E2E, with their speedups). Images
are embedded, so the report works offline and makes no requests.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any, Mapping, Sequence

import numpy as np

from pytest_sme2.evidence.categories import Category
from pytest_sme2.report.table import fewer as fewer_text

CATEGORY_COLOURS = {
    Category.CONV.value: "#4e79a7",
    Category.GEMM.value: "#f28e2b",
    Category.DATA_MOVEMENT.value: "#e15759",
    Category.ELEMENTWISE.value: "#76b7b2",
    Category.OTHER.value: "#bab0ac",
}
_DPI = 96


def _figure(width: float, height: float):  # noqa: ANN202 - matplotlib types
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def fit(figure) -> None:  # noqa: ANN001 - matplotlib types
    """Every title wrapped to the picture's width and every label drawn inside its plot, by widening the plot's
    data range where a bar's label runs past it (issue 65: "how many times fewer with SM" cut off, bar labels
    past the plot). Measured on the drawn figure, a few passes: a wrapped title moves the plot."""
    import textwrap

    # drawn without a canvas of its own (savefig picks Agg for PNG itself): a canvas made here from a backend
    # module imported later than matplotlib.figure (pytester's in-process runs drop and re-import modules) made
    # another generation of classes, and Legend refused its own Axes ("Legend needs either Axes or FigureBase")
    for _ in range(4):
        figure.draw_without_rendering()
        changed = False
        for axes in figure.axes:
            title = axes.title
            extent = title.get_window_extent()
            centre = (extent.x0 + extent.x1) / 2  # over its plot, which long tick labels push aside
            room = 2 * min(centre - figure.bbox.x0, figure.bbox.x1 - centre)
            if title.get_text() and extent.width > 0.97 * room:
                chars = max(24, int(len(title.get_text()) * 0.9 * room / extent.width))
                title.set_text("\n".join(textwrap.wrap(title.get_text().replace("\n", " "), chars)))
                changed = True
            right = max((t.get_window_extent().x1 for t in axes.texts if t.get_text()), default=0.0)
            if right > axes.bbox.x1:
                low, high = axes.get_xlim()
                ticks = [t for t in axes.get_xticks() if low <= t <= high]  # the widened part holds labels only
                axes.set_xlim(low, high + (high - low) * 1.1 * (right - axes.bbox.x1) / axes.bbox.width)
                axes.set_xticks(ticks)
                changed = True
        if not changed:
            return


def _data_uri(figure) -> str:  # noqa: ANN001
    fit(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _time_label(emulated: bool) -> str:
    return "ms per run (EMULATED, not hardware timing)" if emulated else "ms per run"


def latency_chart(profiles: Sequence[Mapping[str, Any]]) -> str:
    """Per-run E2E latency of each variant: a box plot with every run as a dot."""
    figure = _figure(7.0, 0.9 + 0.55 * len(profiles))
    axes = figure.add_subplot()
    samples = [np.asarray(p["e2e_ms"], dtype=float) for p in profiles]
    labels = [p["variant"] for p in profiles]
    axes.boxplot(samples, vert=False, widths=0.5, showfliers=False)
    rng = np.random.default_rng(0)  # fixed jitter: the same test entry always draws the same picture
    for i, values in enumerate(samples, start=1):
        axes.scatter(values, i + rng.uniform(-0.15, 0.15, values.size), s=10, alpha=0.6, color="#4e79a7")
        axes.annotate(
            f"median {np.median(values):.3f}", (np.median(values), i - 0.36), fontsize=8, ha="center", va="center"
        )
    axes.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
    axes.invert_yaxis()  # first variant on top, as in the category chart
    axes.margins(x=0.08)  # room for the median labels at either end
    axes.set_xlabel("E2E (Method::execute) " + _time_label(any(p.get("emulated") for p in profiles)), fontsize=8)
    axes.set_title("Per-run latency of each variant", fontsize=10)
    axes.tick_params(labelsize=8)
    return _data_uri(figure)


def _counted(profiles: Sequence[Mapping[str, Any]]) -> bool:
    return bool(profiles) and all(p.get("basis") == "instructions" for p in profiles)


def _category_bars(
    axes,
    shares: Sequence[Mapping[str, float]],
    sizes: Sequence[float],  # noqa: ANN001
    labels: Sequence[str],
) -> None:
    """One horizontal bar per row, stacked by category: each category ``share x size`` wide, labelled with its
    share where it is wide enough to read (8% or more)."""
    left = np.zeros(len(shares))
    for category in Category:
        name = category.value
        row_shares = [float(row.get(name) or 0.0) for row in shares]
        widths = np.array([share * size for share, size in zip(row_shares, sizes)])
        bars = axes.barh(range(len(shares)), widths, left=left, color=CATEGORY_COLOURS[name], label=name)
        for bar, share in zip(bars, row_shares):
            if share >= 0.08:
                axes.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{share:.0%}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
        left += widths
    axes.set_yticks(range(len(shares)), labels, fontsize=8)
    axes.invert_yaxis()


def category_chart(profiles: Sequence[Mapping[str, Any]]) -> str:
    """Stacked bars of mean time (or, counted under emulation, instructions) per category per run, one bar
    per variant (share x mean E2E)."""
    figure = _figure(7.0, 1.2 + 0.55 * len(profiles))
    axes = figure.add_subplot()
    counted = _counted(profiles)
    scale = [p["instructions"]["per_inference"] / 1e6 if counted else p["latency"]["mean_ms"] for p in profiles]
    _category_bars(axes, [p["shares"] for p in profiles], scale, [p["variant"] for p in profiles])
    if counted:
        axes.set_xlabel("million instructions per inference (counted under emulation, exact)", fontsize=8)
        axes.set_title("Where the instructions went (labels: share of E2E instructions)", fontsize=10)
    else:
        axes.set_xlabel("mean " + _time_label(any(p.get("emulated") for p in profiles)), fontsize=8)
        axes.set_title("Where time went (labels: share of E2E)", fontsize=10)
    figure.legend(fontsize=7, ncols=5, loc="outside lower center", frameon=False)
    axes.tick_params(labelsize=8)
    return _data_uri(figure)


def target_share_chart(title: str, columns: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """One variant on several targets (combined report): a 100% bar of category shares per target, where the
    bottleneck sits on each; shares of time on hardware, of counted instructions where emulated."""
    figure = _figure(7.0, 1.2 + 0.55 * len(columns))
    axes = figure.add_subplot()
    # "emulated (qemu ... , EMULATED) #2" -> "emulated #2, instructions": the tables above carry the details
    labels = [
        f"{target.split(' (')[0]}{' #' + target.rsplit(' #', 1)[1] if ') #' in target else ''}, "
        f"{'instructions' if _counted([profile]) else 'time'}"
        for target, profile in columns
    ]
    _category_bars(axes, [profile.get("shares") or {} for _, profile in columns], [1.0] * len(columns), labels)
    axes.xaxis.set_major_formatter(lambda value, _pos: f"{value:.0%}")
    axes.set_xlabel("share of E2E: of time on hardware, of counted instructions where emulated", fontsize=8)
    axes.set_title(title, fontsize=10)
    figure.legend(fontsize=7, ncols=5, loc="outside lower center", frameon=False)
    axes.tick_params(labelsize=8)
    return _data_uri(figure)


def operator_chart(comparison: Mapping[str, Any], top: int = 10) -> str:
    """Top operators by share of E2E, SME2 off vs on, annotated with each operator's speedup."""
    ops = list(comparison["operators"])[:top]
    figure = _figure(7.0, 1.2 + 0.38 * len(ops))
    axes = figure.add_subplot()
    y = np.arange(len(ops))
    axes.barh(y - 0.2, [op["off_share"] for op in ops], height=0.4, color="#bab0ac", label="SME2 off")
    axes.barh(y + 0.2, [op["on_share"] for op in ops], height=0.4, color="#4e79a7", label="SME2 on")
    counted = comparison.get("unit") == "instructions"
    for i, op in enumerate(ops):
        sp, fewer = op.get("speedup"), op.get("fewer_instructions")
        text = (
            fewer_text(fewer)
            if counted and fewer
            else f"{sp['value']:.2f}x"
            if sp
            else "emulated"
            if comparison.get("emulated")
            else "unmatched"
        )
        axes.text(max(op["off_share"], op["on_share"]) + 0.005, i, text, va="center", fontsize=7)
    _share_axes(
        axes,
        [op["op"] for op in ops],
        bool(comparison.get("emulated")),
        "Top operators: share of E2E instructions, and how many times fewer with SME2"
        if counted
        else "Top operators: share of E2E and speedup",
        counted,
    )
    axes.legend(fontsize=7, loc="lower right")
    return _data_uri(figure)


def thread_scaling_chart(comparisons: Sequence[Mapping[str, Any]]) -> str:
    """SME2 speedup (median off / median on) against thread count, with its 95% interval, one line a program."""
    figure = _figure(5.5, 3.0)
    axes = figure.add_subplot()
    programs: dict[str, list[Mapping[str, Any]]] = {}
    for c in comparisons:
        programs.setdefault(f"{c['model']} {c['recipe']}", []).append(c)
    for label, group in programs.items():
        group = sorted(group, key=lambda c: int(c["threads"]))
        x = [int(c["threads"]) for c in group]
        y = [c["speedup"]["value"] for c in group]
        low = [c["speedup"]["value"] - c["speedup"]["low"] for c in group]
        high = [c["speedup"]["high"] - c["speedup"]["value"] for c in group]
        axes.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=label)
    axes.axhline(1.0, color="#999999", linewidth=0.8, linestyle="--")
    axes.set_xlabel("threads", fontsize=8)
    axes.set_ylabel("SME2 speedup (off / on)", fontsize=8)
    axes.set_title("SME2 speedup by threads (95% bootstrap CI; below 1: SME2 slower)", fontsize=9)
    axes.tick_params(labelsize=7)
    axes.legend(fontsize=7)
    return _data_uri(figure)


def top_ops_chart(profile: Mapping[str, Any], top: int = 10) -> str:
    """Top operators of a single profile by share of E2E (for tests without an on/off pair)."""
    ops = list(profile["top_ops"])[:top]
    counted = _counted([profile])
    figure = _figure(7.0, 1.0 + 0.32 * len(ops))
    axes = figure.add_subplot()
    colours = [CATEGORY_COLOURS.get(op["category"], "#999999") for op in ops]
    axes.barh(range(len(ops)), [op["instruction_share" if counted else "share"] for op in ops], color=colours)
    _share_axes(
        axes,
        [op["event"] for op in ops],
        bool(profile.get("emulated")),
        f"Top operators: {profile['variant']}",
        counted,
    )
    return _data_uri(figure)


def _share_axes(
    axes,
    labels: Sequence[str],
    emulated: bool,
    title: str,  # noqa: ANN001
    counted: bool = False,
) -> None:
    """Operator names down the side (heaviest on top), share of E2E along the bottom."""
    axes.set_yticks(range(len(labels)), [_short(label) for label in labels], fontsize=7)
    axes.invert_yaxis()
    axes.xaxis.set_major_formatter(lambda value, _pos: f"{value:.0%}")
    axes.set_xlabel(
        "share of E2E instructions (counted under emulation)"
        if counted
        else "share of E2E" + (" (EMULATED timing)" if emulated else ""),
        fontsize=8,
    )
    axes.set_title(title, fontsize=10)
    axes.tick_params(labelsize=8)


def _short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


def _session_label(session: str) -> str:
    """``session-20261125-161714-12837`` -> ``11-25 16:17``; other names shortened as they are."""
    stamp = re.search(r"(\d{4})(\d{2})(\d{2})-(\d{2})(\d{2})\d{2}", session)
    return f"{stamp[2]}-{stamp[3]} {stamp[4]}:{stamp[5]}" if stamp else session.removeprefix("session-")[:14]


def history_chart(
    title: str, quantity: str, values: Sequence[float], labels: Sequence[str], cuts: Sequence[int]
) -> str:
    """One quantity over sessions, with each change point drawn where its new level begins."""
    figure = _figure(7.0, 2.2)
    axes = figure.add_subplot()
    positions = np.arange(len(values))
    axes.plot(positions, values, marker="o", markersize=3, linewidth=1, color="#4e79a7")
    for cut in cuts:
        axes.axvline(cut - 0.5, color="#e15759", linestyle="--", linewidth=1)
        axes.annotate(
            f"change at {labels[cut]}",
            (cut - 0.5, max(values)),
            fontsize=7,
            color="#e15759",
            ha="left",
            va="top",
            rotation=90,
        )
    # whole sessions on the axis, named by their (shortened) session folder, at most about 12 of them
    step = max(1, len(values) // 12 + (len(values) % 12 > 0))
    ticks = positions[::step]
    axes.set_xticks(ticks, [_session_label(labels[i]) for i in ticks], rotation=30, ha="right")
    axes.set_xlabel("session (oldest first)", fontsize=8)
    axes.set_ylabel(quantity, fontsize=8)
    axes.set_title(title, fontsize=9)
    axes.tick_params(labelsize=7)
    return _data_uri(figure)
