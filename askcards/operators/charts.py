"""Server-rendered SVG bar charts for the operator dashboard: geometry only, no JavaScript.

``bar_chart`` lays out grouped vertical bars (one group per label on the x axis, one bar per
series) on a value axis from 0 to a round maximum; the template
``admin/askcards/chart.svg.html`` draws it. Pure data in, data out.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 640, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 18, 44
COLOURS = ("#417690", "#e0a030", "#c0392b", "#5b8c3a", "#7d5ba6", "#888888")


@dataclass(frozen=True)
class Bar:
    series: str
    group: str
    value: float
    text: str  # the value as shown above the bar
    x: float
    y: float
    width: float
    height: float
    colour: str

    @property
    def middle(self) -> float:
        return round(self.x + self.width / 2, 1)


@dataclass(frozen=True)
class Tick:
    y: float
    text: str


@dataclass(frozen=True)
class GroupLabel:
    x: float
    text: str


@dataclass(frozen=True)
class Series:
    name: str
    colour: str


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    width: int
    height: int
    bars: list[Bar]
    ticks: list[Tick]
    groups: list[GroupLabel]
    series: list[Series]
    left: int = LEFT
    right: int = WIDTH - RIGHT
    baseline: int = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return not self.bars


# Steps between grid lines: counts go 1, 2, 5, 10, 20, 50…; durations (seconds) in clock units.
COUNT_STEPS = tuple(base * 10**power for power in range(0, 9) for base in (1, 2, 5))
DURATION_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400,
                  172800, 432000, 864000)
MAX_TICKS = 5


def axis_step(largest: float, steps: Sequence[float] = COUNT_STEPS) -> tuple[float, int]:
    """The grid step and the number of steps above 0: the smallest step that covers ``largest``
    in at most MAX_TICKS steps (one step of 1 for nothing to show)."""
    for step in steps:
        count = max(1, math.ceil(largest / step))
        if count <= MAX_TICKS:
            return float(step), count
    step = float(steps[-1]) * math.ceil(largest / (steps[-1] * MAX_TICKS))
    return step, max(1, math.ceil(largest / step))


def plain_number(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def duration(seconds: float) -> str:
    """``0``, ``42 s``, ``3.5 min``, ``1.2 h``."""
    if seconds == 0:
        return "0"
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{_one_decimal(seconds)} s"
    if seconds < 90 * 60:
        return f"{_one_decimal(seconds / 60)} min"
    return f"{_one_decimal(seconds / 3600)} h"


def _one_decimal(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def bar_chart(
    *,
    name: str,
    title: str,
    groups: Sequence[str],
    series: Sequence[str],
    values: dict[tuple[str, str], float],
    fmt: Callable[[float], str] = plain_number,
    steps: Sequence[float] = COUNT_STEPS,
) -> Chart:
    """Bars for every (group, series) pair in ``values`` (missing pairs are 0 and drawn 0 high)."""
    palette = [Series(item, COLOURS[index % len(COLOURS)]) for index, item in enumerate(series)]
    if not groups:
        return Chart(name, title, WIDTH, HEIGHT, [], [], [], palette)
    step, ticks = axis_step(max(values.values(), default=0.0), steps)
    top = step * ticks
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_width / len(groups)
    bar_width = min(36.0, slot * 0.8 / len(series))
    bars, labels = [], []
    for index, group in enumerate(groups):
        start = LEFT + slot * index + (slot - bar_width * len(series)) / 2
        fits = max(3, int(slot / 7))  # about 7 px a character at the label's size
        labels.append(GroupLabel(LEFT + slot * (index + 0.5), group if len(group) <= fits else group[: fits - 1] + "…"))
        for position, item in enumerate(palette):
            value = float(values.get((group, item.name), 0.0))
            height = plot_height * value / top
            x, y = round(start + bar_width * position, 1), round(TOP + plot_height - height, 1)
            width = round(max(1.0, bar_width - 2), 1)
            bars.append(Bar(item.name, group, value, fmt(value), x, y, width, round(height, 1), item.colour))
    axis = [Tick(round(TOP + plot_height * (1 - n / ticks), 1), fmt(step * n)) for n in range(ticks + 1)]
    return Chart(name, title, WIDTH, HEIGHT, bars, axis, labels, palette)
