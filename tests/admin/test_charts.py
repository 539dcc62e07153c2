"""The dashboard's SVG bar charts: round axis steps, and bars that stay inside the plot."""
from __future__ import annotations

import pytest

from askcards.operators import charts


@pytest.mark.parametrize(
    "largest, steps, expected",
    [
        (0, charts.COUNT_STEPS, (1.0, 1)),
        (4, charts.COUNT_STEPS, (1.0, 4)),
        (7, charts.COUNT_STEPS, (2.0, 4)),
        (230, charts.COUNT_STEPS, (50.0, 5)),
        (44, charts.DURATION_STEPS, (10.0, 5)),
        (600, charts.DURATION_STEPS, (120.0, 5)),
        (3 * 86400, charts.DURATION_STEPS, (86400.0, 3)),
    ],
)
def test_axis_steps_are_round(largest, steps, expected):
    assert charts.axis_step(largest, steps) == expected


def test_the_largest_value_reaches_the_top_of_its_axis():
    values = {("a", "x"): 5, ("b", "x"): 2}
    chart = charts.bar_chart(name="c", title="t", groups=["a", "b"], series=["x"], values=values)
    tallest = max(chart.bars, key=lambda bar: bar.value)
    assert tallest.y == chart.ticks[-1].y and tallest.y + tallest.height == chart.baseline
    assert [tick.text for tick in chart.ticks] == ["0", "1", "2", "3", "4", "5"]


def test_a_missing_value_is_a_flat_bar():
    chart = charts.bar_chart(name="c", title="t", groups=["a", "b"], series=["x", "y"], values={("a", "x"): 3})
    assert [(bar.group, bar.series, bar.height) for bar in chart.bars if bar.value == 0] == [
        ("a", "y", 0.0), ("b", "x", 0.0), ("b", "y", 0.0)
    ]


def test_bars_stay_inside_the_plot_with_many_groups():
    groups = [f"agent-{n}" for n in range(40)]
    chart = charts.bar_chart(name="c", title="t", groups=groups, series=["web", "feishu", "dingtalk"],
                             values={(group, "web"): n for n, group in enumerate(groups)})
    assert all(chart.left <= bar.x and bar.x + bar.width <= chart.right for bar in chart.bars)
    assert all(len(label.text) <= 3 for label in chart.groups)  # clipped to their slot


def test_durations_read_in_clock_units():
    seconds = (0, 4.25, 42, 210, 900, 5400)
    assert [charts.duration(s) for s in seconds] == ["0", "4.2 s", "42 s", "3.5 min", "15 min", "1.5 h"]


def test_no_groups_is_an_empty_chart():
    assert charts.bar_chart(name="c", title="t", groups=[], series=["x"], values={}).empty
