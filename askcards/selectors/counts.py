"""Counts for /metrics and for the admin's long lists (estimated past a size)."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import QuerySet
from django.db.models.functions import Coalesce

from ..db import statements
from ..models import Ask, AskEvent, CardMessage, OutboxEvent, PanelPresence, PrunedTally, Respondent


# ------------------------------------------------------------------------------------ metrics
# What /metrics reports from the database (askcards.operators.metrics): every process answers the same,
# because the figures are read at scrape time from the rows that hold the truth. Each is one
# grouped query; none reads an answer or a secret.


# Above this many rows (PostgreSQL's estimate) a table's admin list counts at most
# COUNT_UP_TO rows exactly and estimates beyond.
EXACT_COUNT_BELOW = 50_000
COUNT_UP_TO = 1000


def changelist_count(queryset: QuerySet[Any]) -> int:
    """How many rows an admin list holds, without counting a large table row by row.

    SQLite, or a table PostgreSQL estimates below ``EXACT_COUNT_BELOW`` rows: an exact
    ``COUNT(*)``. Otherwise the rows are counted up to ``COUNT_UP_TO`` (a ``COUNT`` over a
    ``LIMIT``ed subquery, which stops there); a list that holds fewer is exact, which keeps the
    admin's "show all" and single-page decisions right (they would render every row of an
    underestimated list). Beyond that: the table's estimate (``pg_class``) when the list is
    unfiltered, else the planner's estimate of the filtered query (EXPLAIN, which reads no rows),
    and never less than what was counted."""
    estimate = statements.table_row_estimate(queryset.model)
    if estimate is None or estimate < EXACT_COUNT_BELOW:
        return queryset.count()
    # In the list's own order: the index that serves the page serves the count.
    counted = queryset.values("pk")[:COUNT_UP_TO].count()
    if counted < COUNT_UP_TO:
        return counted
    if queryset.query.where:
        plan = json.loads(queryset.order_by().values("pk").explain(format="json"))
        if isinstance(plan, list):  # the driver handed EXPLAIN's document over as text
            plan = plan[0]
        estimate = int(plan["Plan"]["Plan Rows"])
    return max(estimate, counted)


def metrics_asks() -> list[dict[str, Any]]:
    """Asks by tool, session platform, status and reason (open ones with reason "")."""
    rows = Ask.objects.order_by().values("tool", "session__platform", "status", "reason").annotate(count=models.Count("pk"))
    return [dict(row) for row in rows]


def metrics_pruned() -> dict[str, list[tuple[list[str], int]]]:
    """What retention deleted, by metric: (label values, count) to add to the database's own
    counts, so ``/metrics``' counters never go down (``models.PrunedTally``)."""
    tallies: dict[str, list[tuple[list[str], int]]] = {metric: [] for metric in PrunedTally.Metric.values}
    for metric, labels, count in PrunedTally.objects.values_list("metric", "labels", "count"):
        tallies.setdefault(metric, []).append((labels.split("|"), count))
    return tallies


def metrics_answer_times(bounds: tuple[float, ...]) -> list[dict[str, Any]]:
    """Answered asks by tool: how many took at most each of ``bounds`` seconds from being shown
    (activated) to being answered (``le_<i>``), their ``count`` and the total (``seconds``)."""
    taken = statements.SecondsBetween(models.F("closed_at"), Coalesce("activated_at", "created_at"))
    buckets = {f"le_{index}": models.Count("pk", filter=models.Q(taken__lte=bound)) for index, bound in enumerate(bounds)}
    rows = (
        Ask.objects.filter(status=Ask.Status.ANSWERED, closed_at__isnull=False)
        .order_by()
        .annotate(taken=taken)
        .values("tool")
        .annotate(count=models.Count("pk"), total=models.Sum("taken"), **buckets)
    )
    return [{**row, "seconds": row["total"] or 0.0} for row in rows]


def metrics_responses() -> list[dict[str, Any]]:
    """People's answers by tool, the surface they answered on and their status."""
    rows = (
        Respondent.objects.exclude(surface="").order_by().values("ask__tool", "surface", "status")
        .annotate(count=models.Count("pk"))
    )
    return [dict(row) for row in rows]


def metrics_ignored_clicks() -> dict[tuple[str, str], int]:
    """Clicks that changed nothing (audit rows of kind ``ignored`` from a surface), by surface and
    cause: the part of the recorded attempt before "/" (``late/answered`` counts as ``late``)."""
    rows = (
        AskEvent.objects.filter(kind=AskEvent.Kind.IGNORED)
        .exclude(surface="")
        .order_by()
        .values("surface", "detail__attempted")
        .annotate(count=models.Count("pk"))
    )
    counted: dict[tuple[str, str], int] = {}
    for row in rows:
        cause = str(row["detail__attempted"] or "unknown").split("/", 1)[0]
        key = (row["surface"], cause)
        counted[key] = counted.get(key, 0) + row["count"]
    return counted


def metrics_card_sync() -> list[dict[str, Any]]:
    """Card messages behind their desired state, by platform: all of them (``backlog``) and those
    whose last push failed (``failing``, a retry pending)."""
    rows = (
        CardMessage.objects.filter(version__gt=models.F("synced_version"))
        .order_by()
        .values("platform")
        .annotate(backlog=models.Count("pk"), failing=models.Count("pk", filter=models.Q(sync_attempts__gt=0)))
    )
    return [dict(row) for row in rows]


def metrics_outbox(now: datetime) -> dict[str, Any]:
    """Webhook deliveries: delivered, given up, attempts made, and the backlog (events of agents
    with a webhook URL, neither delivered nor given up) with the age of its oldest event."""
    webhooks = OutboxEvent.objects.order_by()
    done = webhooks.aggregate(
        delivered=models.Count("pk", filter=models.Q(delivered_via="webhook")),
        given_up=models.Count("pk", filter=models.Q(failed_at__isnull=False)),
        attempts=models.Sum("attempts"),
    )
    waiting = webhooks.filter(delivered_at__isnull=True, failed_at__isnull=True).exclude(agent__webhook_url="")
    backlog = waiting.aggregate(count=models.Count("pk"), oldest=models.Min("created_at"))
    oldest = backlog["oldest"]
    return {
        "delivered": done["delivered"],
        "given_up": done["given_up"],
        "attempts": done["attempts"] or 0,
        "backlog": backlog["count"],
        "oldest_seconds": max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0,
    }


def metrics_panel_sockets(now: datetime) -> int:
    """Connected panel sockets of every process: presence rows still fresh at ``now``."""
    return PanelPresence.objects.filter(last_seen__gte=now - PanelPresence.TTL).count()
