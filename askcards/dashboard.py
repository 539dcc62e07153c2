"""The operator dashboard's numbers (admin): read-only aggregate queries, cheap on a big table.

- open asks, by agent and by the surface they are shown on (an ask on a Feishu card and on the
  web panel counts once for each): one GROUP BY over the open asks (the partial
  ``ask_open_deadline_idx`` holds exactly those rows);
- time to answer, per surface the answer came from, p50 and p90 over the window: a respondent's
  ``answered_at`` minus the ask's ``activated_at`` (from when the person could see it). One
  grouped count, then for each surface and percentile the one row at that rank, sorted by the
  database (nearest rank: the p-th percentile of n answers is the ⌈p·n⌉-th smallest);
- per day of the window: asks that expired, asks that failed because their card could not be
  delivered (``delivery_failed``), and agent events whose webhook delivery was given up;
- webhook backlog: agent events not yet delivered, per agent, split into those waiting for a
  webhook attempt and those waiting for the agent to read ``/events`` (agents without a webhook);
  the partial ``outbox_due_idx`` holds exactly those rows.

The window is the last ``days`` calendar days in the current time zone (the operator's, see
``askcards.timezones``), today included. Asks are looked up through their indexed ``created_at``:
an ask closes at most ``ASK_LIFETIME`` after it was created (``MAX_TIMEOUT_SECONDS``, 13 days,
plus slack), so asks created earlier than that before the window cannot have ended inside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import Count, F, Min, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from .charts import DURATION_STEPS, Chart, bar_chart, duration
from .db.statements import SecondsBetween
from .models import Ask, OutboxEvent, Respondent

WINDOW_DAYS = 7
ASK_LIFETIME = timedelta(days=14)
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
    since = timezone.make_aware(datetime.combine(first, time.min))
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
    answered = Respondent.objects.filter(
        status__in=(Respondent.Status.SUBMITTED, Respondent.Status.EMPTY),
        answered_at__gte=since,
        answered_at__lte=now,
        ask__created_at__gte=since - ASK_LIFETIME,
        ask__activated_at__isnull=False,
    )
    counts = answered.values_list("surface").annotate(n=Count("id")).order_by("surface")
    seconds = SecondsBetween(F("answered_at"), F("ask__activated_at"))
    result = []
    for surface, n in counts:
        ordered = answered.filter(surface=surface).annotate(seconds=seconds).order_by("seconds")
        at = {
            p: ordered.values_list("seconds", flat=True)[rank - 1 : rank].get()
            for p in PERCENTILES
            for rank in [max(1, math.ceil(p * n / 100))]
        }
        result.append(AnswerTimes(surface or NO_SURFACE, n, max(0.0, at[50]), max(0.0, at[90])))
    return result


def per_day(*, since: datetime, now: datetime, days: list[date]) -> list[Day]:
    ended = (
        Ask.objects.filter(
            created_at__gte=since - ASK_LIFETIME,
            closed_at__gte=since,
            closed_at__lte=now,
            reason__in=(Ask.Reason.TIMEOUT, Ask.Reason.DELIVERY_FAILED),
        )
        .annotate(day=TruncDate("closed_at"))
        .values_list("day", "reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    by_day: dict[tuple[date, str], int] = {(day, reason): n for day, reason, n in ended}
    given_up = (
        OutboxEvent.objects.filter(failed_at__gte=since, failed_at__lte=now)
        .annotate(day=TruncDate("failed_at"))
        .values_list("day")
        .annotate(n=Count("id"))
        .order_by()
    )
    by_day.update({(day, "given_up"): n for day, n in given_up})
    return [
        Day(
            day,
            expired=by_day.get((day, Ask.Reason.TIMEOUT), 0),
            delivery_failed=by_day.get((day, Ask.Reason.DELIVERY_FAILED), 0),
            webhooks_given_up=by_day.get((day, "given_up"), 0),
        )
        for day in days
    ]


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
