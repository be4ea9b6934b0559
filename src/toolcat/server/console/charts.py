"""The quality page's charts: a saved eval's recall at 1, 5 and 10 as grouped bars, one
group per source, one bar per search mode (the plain baseline's beside toolcat's).

Only the geometry is made here; ``quality.html`` draws it as inline SVG with Jinja2's
autoescape, so a source name (a bench folder's name: outside text) is escaped like every
other text on the console. Every label is also made printable and cut short here: a control
character is not allowed in XML even escaped, and a long name would push the bars off the
chart. The sizes are bounded whatever the result holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...definitions.printable import escape
from ...models import EvalResult, EvalRow

METRICS = ("R@1", "R@5", "R@10")
PLOT_HEIGHT = 200.0  # a bar of recall 1.0
BAR_WIDTH = 14.0
GROUP_GAP = 18.0
MIN_GROUP_WIDTH = 100.0  # room for a source's name under its bars
LEFT, TOP, BOTTOM = 60.0, 16.0, 36.0  # room for the axis and its numbers; for the names
LEGEND_WIDTH = 210.0
LEGEND_ROW = 18.0
MAX_GROUPS = 24  # sources drawn; the table below lists every row
MAX_SERIES = 12  # modes drawn per source
LABEL_CHARS = 15  # a source's name under its group (the whole name is in its tooltip)
LEGEND_CHARS = 34
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str  # the tooltip: source, mode and value


@dataclass(frozen=True)
class Series:
    index: int
    label: str
    baseline: bool
    css: str


@dataclass(frozen=True)
class Chart:
    metric: str
    width: float
    height: float
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    ticks: list[tuple[float, str]]  # (y, label)
    groups: list[tuple[float, str]]  # (x of the label, the source)
    legend: list[tuple[float, Series]]  # (y, series)
    legend_x: float
    bars: list[Bar]
    sources: int  # how many the result holds (``groups`` draws at most MAX_GROUPS)
    series_total: int


def label(text: str, limit: int) -> str:
    """``text`` printable (controls written as escapes) and at most ``limit`` characters."""
    return escape(text, limit, spaces=True)


def _series_key(row: EvalRow) -> tuple[str, bool]:
    return row.mode, row.learned_from > 0


def charts(result: EvalResult) -> list[Chart]:
    """One chart per recall cut-off (R@1, R@5, R@10)."""
    sources = list(dict.fromkeys(row.source for row in result.rows))
    keys = list(dict.fromkeys(_series_key(r) for r in result.rows if not r.baseline))
    keys += list(dict.fromkeys(_series_key(r) for r in result.rows if r.baseline))
    series_total = len(keys)
    keys = keys[:MAX_SERIES]
    plain = {key for key in keys if any(r.baseline and _series_key(r) == key for r in result.rows)}
    series = []
    for i, key in enumerate(keys):
        mode, learned = key
        text = f"{mode} (after learning)" if learned else mode
        if key in plain:
            text += " · plain baseline"
        css = f"bar baseline-{i % 2}" if key in plain else f"bar series-{i % 8}"
        series.append(Series(i, label(text, LEGEND_CHARS), key in plain, css))
    shown = sources[:MAX_GROUPS]
    value = {(r.source, _series_key(r)): r for r in result.rows}
    group_width = max(len(series) * BAR_WIDTH + GROUP_GAP, MIN_GROUP_WIDTH)
    plot_right = LEFT + max(1, len(shown)) * group_width
    legend_height = len(series) * LEGEND_ROW
    height = TOP + max(PLOT_HEIGHT, legend_height) + BOTTOM
    out = []
    for metric in METRICS:
        bars = []
        groups = []
        for g, source in enumerate(shown):
            x0 = LEFT + g * group_width + (group_width - len(series) * BAR_WIDTH) / 2
            groups.append((x0 + len(series) * BAR_WIDTH / 2, label(source, LABEL_CHARS)))
            for s, key in zip(series, keys, strict=True):
                row = value.get((source, key))
                if row is None:
                    continue
                score = _metric(row, metric)
                bar_height = round(score * PLOT_HEIGHT, 1)
                bars.append(
                    Bar(
                        x=round(x0 + s.index * BAR_WIDTH, 1),
                        y=round(TOP + PLOT_HEIGHT - bar_height, 1),
                        width=BAR_WIDTH - 2,
                        height=bar_height,
                        css=s.css,
                        title=label(f"{source} · {s.label}: {metric} {score:.3f}", 400),
                    )
                )
        out.append(
            Chart(
                metric=metric,
                width=plot_right + 16 + LEGEND_WIDTH,
                height=height,
                plot_left=LEFT,
                plot_right=plot_right,
                plot_top=TOP,
                plot_bottom=TOP + PLOT_HEIGHT,
                ticks=[(TOP + PLOT_HEIGHT * (1 - t), f"{t:.2f}") for t in TICKS],
                groups=groups,
                legend=[(TOP + i * LEGEND_ROW, s) for i, s in enumerate(series)],
                legend_x=plot_right + 16,
                bars=bars,
                sources=len(sources),
                series_total=series_total,
            )
        )
    return out


def _metric(row: EvalRow, metric: str) -> float:
    return {"R@1": row.r1, "R@5": row.r5, "R@10": row.r10}[metric]
