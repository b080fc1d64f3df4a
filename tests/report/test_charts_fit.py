"""Every chart's text inside the picture and every label inside its plot (issue 65: a chart title read "how many
times fewer with SM", cut at the edge, and bar labels ran past the plot). Drawn figures measured by matplotlib's
own renderer: what a browser shows of a PNG is these pixels."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sme2.report import charts

LONG = "Fully Connected (NC, PF32) GEMM after layers.11.attention.wq: aten.linear.default"


def _comparison(counted: bool) -> dict[str, Any]:
    ops = [
        {
            "op": f"{LONG} #{i}",
            "off_share": 0.9 / (i + 1),
            "on_share": 0.5 / (i + 1),
            "speedup": None if counted else {"value": 3.0 + i},
            "fewer_instructions": 12.5 + i if counted else None,
        }
        for i in range(10)
    ]
    return {"operators": ops, "unit": "instructions" if counted else "time", "emulated": counted}


def _captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    figures: list[Any] = []
    original = charts._data_uri

    def capture(figure: Any) -> str:
        figures.append(figure)
        return original(figure)

    monkeypatch.setattr(charts, "_data_uri", capture)
    return figures


@pytest.mark.parametrize("counted", [True, False], ids=["counted", "timed"])
def test_operator_chart_titles_and_labels_fit(monkeypatch: pytest.MonkeyPatch, counted: bool) -> None:
    # imported here, not at collection: a matplotlib module imported before pytester's in-process sessions drop
    # and re-import the rest mixes two generations of its classes (CI: "Legend needs either Axes or FigureBase")
    from matplotlib.text import Text

    figures = _captured(monkeypatch)
    charts.operator_chart(_comparison(counted))
    (figure,) = figures
    frame = figure.bbox
    for text in figure.findobj(Text):
        if not text.get_text() or not text.get_visible():
            continue
        box = text.get_window_extent()
        assert box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1, (text.get_text(), box, frame)
    for axes in figure.axes:
        for text in axes.texts:  # a bar's label inside its plot
            assert text.get_window_extent().x1 <= axes.bbox.x1 + 1, text.get_text()
        assert "with SME2" in axes.get_title().replace("\n", " ") or not counted  # wrapped, not cut
