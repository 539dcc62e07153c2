"""The operator dashboard's numbers (admin): read-only aggregate queries, one per figure.

- open asks, by agent and by the surface they are shown on (an ask on a Feishu card and on the
  web panel counts once for each): one GROUP BY over the open asks (the partial
  ``ask_open_deadline_idx`` holds exactly those rows);
- time to answer, per surface the answer came from, p50 and p90 over the window: a respondent's
  ``answered_at`` minus the ask's ``activated_at`` (from when the person could see it), by
  nearest rank (the p-th percentile of n answers is the ⌈p·n/100⌉-th smallest). One query: the
  database ranks the window's answers and returns only the rows at the wanted ranks;
- per day of the window: asks that expired, asks that failed because their card could not be
  delivered (``delivery_failed``), and agent events whose webhook delivery was given up: one
  query of filtered counts for asks, one for events;
- webhook backlog: agent events not yet delivered, per agent, split into those waiting for a
  webhook attempt and those waiting for the agent to read ``/events`` (agents without a webhook);
  the partial ``outbox_due_idx`` holds exactly those rows.

The window is the last ``days`` calendar days in the current time zone (the operator's, see
``askcards.operators.timezones``), today included. Nothing here runs Python per row in the database, and
no row comes back to Python but the aggregates. The time-to-answer and per-day queries scan the
respondent and ask tables (no index on answer or close times: each would cost every answer's
UPDATE).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Count, F, Min, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from askcards.operators.charts import DURATION_STEPS, Chart, bar_chart, duration
from askcards.db.statements import SecondsBetween
from askcards.models import Ask, OutboxEvent, Respondent

WINDOW_DAYS = 7
PERCENTILES = (50, 90)
NO_SURFACE = "(none)"


@dataclass(frozen=True)
class OpenAsks:
    agent: str
    surface: str
    count: int


@dataclass(frozen=True)
class AnswerTimes:
    surface: str
    answers: int
    p50: float  # seconds
    p90: float


@dataclass(frozen=True)
class Day:
    day: date
    expired: int
    delivery_failed: int
    webhooks_given_up: int


@dataclass(frozen=True)
class Backlog:
    agent: str
    webhook: int  # waiting for a webhook attempt (due now or retrying later)
    feed: int  # waiting for the agent to read /events (it has no webhook)
    oldest: datetime


@dataclass(frozen=True)
class Dashboard:
    now: datetime
    since: datetime
    open_asks: list[OpenAsks]
    answer_times: list[AnswerTimes]
    days: list[Day]
    backlog: list[Backlog]
    open_total: int  # open asks, each counted once (``open_asks`` counts one per surface it is on)


def dashboard(*, now: datetime | None = None, days: int = WINDOW_DAYS) -> Dashboard:
    now = now or timezone.now()
    today = timezone.localdate(now)
    first = today - timedelta(days=days - 1)
    since = _midnight(first)
    open_asks, open_total = open_asks_by_agent_and_surface()
    return Dashboard(
        now=now,
        since=since,
        open_asks=open_asks,
        answer_times=answer_times(since=since, now=now),
        days=per_day(since=since, now=now, days=[first + timedelta(days=n) for n in range(days)]),
        backlog=webhook_backlog(),
        open_total=open_total,
    )


def open_asks_by_agent_and_surface() -> tuple[list[OpenAsks], int]:
    counts: dict[tuple[str, str], int] = {}
    total = 0
    rows = Ask.objects.filter(status__in=Ask.OPEN).values_list("agent__name", "surfaces").annotate(n=Count("id"))
    for agent, surfaces, n in rows.order_by():
        total += n
        for surface in surfaces or [NO_SURFACE]:
            counts[(agent, surface)] = counts.get((agent, surface), 0) + n
    return [OpenAsks(agent, surface, n) for (agent, surface), n in sorted(counts.items())], total


def answer_times(*, since: datetime, now: datetime) -> list[AnswerTimes]:
    """p50 and p90 per surface, by nearest rank, in one query: the database numbers each surface's
    answers by time to answer (a window function) and returns only the rows at the wanted ranks."""
    seconds = SecondsBetween(F("answered_at"), F("ask__activated_at"))
    at_rank = Q()
    for p in PERCENTILES:
        # rank = ⌈p·n/100⌉  ⇔  (rank − 1)·100 < p·n ≤ rank·100, in integers.
        at_rank |= Q(rank100__gte=F("surface_answers") * p, rank100__lt=F("surface_answers") * p + 100)
    rows = (
        Respondent.objects.filter(
            status__in=(Respondent.Status.SUBMITTED, Respondent.Status.EMPTY),
            answered_at__gte=since,
            answered_at__lte=now,
            ask__activated_at__isnull=False,
        )
        .annotate(
            seconds=seconds,
            rank100=Window(RowNumber(), partition_by=[F("surface")], order_by=seconds.asc()) * 100,
            surface_answers=Window(Count("id"), partition_by=[F("surface")]),
        )
        .filter(at_rank)
        .order_by()
        .values_list("surface", "rank100", "surface_answers", "seconds")
    )
    found: dict[str, dict[int, float]] = {}
    counts: dict[str, int] = {}
    for surface, rank100, answers, value in rows:
        counts[surface] = answers
        for p in PERCENTILES:
            if rank100 - 100 < p * answers <= rank100:
                found.setdefault(surface, {})[p] = max(0.0, value)
    return [
        AnswerTimes(surface or NO_SURFACE, counts[surface], found[surface][50], found[surface][90])
        for surface in sorted(found)
    ]


def per_day(*, since: datetime, now: datetime, days: list[date]) -> list[Day]:
    """Counts per day, each a filtered COUNT over the day's bounds in the current zone (computed
    here, so a day is the operator's, daylight saving included): the database compares stored
    times only, where a truncation to dates would run a Python function per row on SQLite."""
    bounds = [(day, _midnight(day), _midnight(day + timedelta(days=1))) for day in days]

    def counts(field: str, **only: Any) -> dict[str, Count]:
        return {
            f"d{n}": Count("id", filter=Q(**{f"{field}__gte": start, f"{field}__lt": end}, **only))
            for n, (_, start, end) in enumerate(bounds)
        }

    ended = Ask.objects.filter(
        closed_at__gte=since,
        closed_at__lte=now,
        reason__in=(Ask.Reason.TIMEOUT, Ask.Reason.DELIVERY_FAILED),
    ).aggregate(
        **{f"expired_{key}": value for key, value in counts("closed_at", reason=Ask.Reason.TIMEOUT).items()},
        **{f"failed_{key}": value for key, value in counts("closed_at", reason=Ask.Reason.DELIVERY_FAILED).items()},
    )
    given_up = OutboxEvent.objects.filter(failed_at__gte=since, failed_at__lte=now).aggregate(**counts("failed_at"))
    return [
        Day(day, ended[f"expired_d{n}"], ended[f"failed_d{n}"], given_up[f"d{n}"])
        for n, (day, _, _) in enumerate(bounds)
    ]


def _midnight(day: date) -> datetime:
    """The start of ``day`` in the current time zone."""
    return timezone.make_aware(datetime.combine(day, time.min))


def webhook_backlog() -> list[Backlog]:
    rows = (
        OutboxEvent.objects.filter(delivered_at__isnull=True, failed_at__isnull=True)
        .values_list("agent__name")
        .annotate(
            webhook=Count("id", filter=Q(next_attempt_at__isnull=False)),
            feed=Count("id", filter=Q(next_attempt_at__isnull=True)),
            oldest=Min("created_at"),
        )
        .order_by("agent__name")
    )
    return [Backlog(agent, webhook, feed, oldest) for agent, webhook, feed, oldest in rows]


def charts(numbers: Dashboard) -> list[Chart]:
    """The dashboard's four charts, in the order the page shows them."""
    agents = sorted({row.agent for row in numbers.open_asks})
    surfaces = sorted({row.surface for row in numbers.open_asks})
    answer_surfaces = [row.surface for row in numbers.answer_times]
    day_names = [day.day.isoformat()[5:] for day in numbers.days]  # MM-DD
    backlog_agents = [row.agent for row in numbers.backlog]
    return [
        bar_chart(
            name="open-asks",
            title="Open asks by agent and surface",
            groups=agents,
            series=surfaces,
            values={(row.agent, row.surface): row.count for row in numbers.open_asks},
        ),
        bar_chart(
            name="time-to-answer",
            title="Time to answer per surface (p50, p90)",
            groups=answer_surfaces,
            series=["p50", "p90"],
            values={
                key: value
                for row in numbers.answer_times
                for key, value in (((row.surface, "p50"), row.p50), ((row.surface, "p90"), row.p90))
            },
            fmt=duration,
            steps=DURATION_STEPS,
        ),
        bar_chart(
            name="per-day",
            title="Expiries and delivery failures per day",
            groups=day_names,
            series=["expired", "card delivery failed", "webhook given up"],
            values={
                key: value
                for name, day in zip(day_names, numbers.days)
                for key, value in (
                    ((name, "expired"), day.expired),
                    ((name, "card delivery failed"), day.delivery_failed),
                    ((name, "webhook given up"), day.webhooks_given_up),
                )
            },
        ),
        bar_chart(
            name="backlog",
            title="Undelivered agent events (webhook backlog)",
            groups=backlog_agents,
            series=["waiting for a webhook attempt", "waiting for /events"],
            values={
                key: value
                for row in numbers.backlog
                for key, value in (
                    ((row.agent, "waiting for a webhook attempt"), row.webhook),
                    ((row.agent, "waiting for /events"), row.feed),
                )
            },
        ),
    ]
