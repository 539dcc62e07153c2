"""Bounded growth of the tables: audit rows (``AskEvent``), outbox events, callback receipts and
closed asks are pruned in small batches once they are old and safe to drop (answer bodies, much
sooner: ``asks.purge_answers``).

Safe means: an audit row only once its ask closed more than ``ASKCARDS_AUDIT_RETENTION_DAYS``
ago (never a row of an open ask), an outbox event only once it was delivered or given up more
than ``ASKCARDS_EVENT_RETENTION_DAYS`` ago (never one an agent has still to receive), 0 keeping
them forever; a callback receipt once it is older than ``CALLBACK_RECEIPT_TTL``, when no platform
can deliver its callback again.

How, at a million rows: the tables are walked in id order (ids grow with time) through windows
of ``ASKCARDS_PRUNE_BATCH`` consecutive ids: one SELECT of the window's prunable ids over the
primary key, then one ``DELETE … WHERE id IN (…)``, each its own short autocommit transaction.
A batch locks only the rows it deletes, rows no answer, click or delivery ever writes again, so
nothing that serves a person waits on it. The walk stops at the first window holding a row newer
than the cutoff (everything after it is newer still), after ``ASKCARDS_PRUNE_BATCHES_PER_PASS``
windows, or at the table's end; the caller keeps the returned cursor and resumes there the next
time, so rows that must stay (an undelivered event of an agent that never reads its feed) are
stepped over once per walk, not on every pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.db.models import BooleanField, Case, Count, Exists, F, OuterRef, Q, When
from django.utils import timezone

from askcards.models import Ask, AskEvent, CallbackReceipt, OutboxEvent, PrunedTally, Respondent

Row = TypeVar("Row", AskEvent, OutboxEvent, CallbackReceipt)

# How long a callback receipt (services.callback_receipt) is kept: longer than any platform can
# deliver the same callback again, or a re-delivery would be handled twice. Feishu re-delivers
# within minutes; a DingTalk signature pair stays acceptable for at most
# 2 × ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS (at most 2 h, settings caps the skew at an hour).
CALLBACK_RECEIPT_TTL = timedelta(days=1)


@dataclass(frozen=True)
class PruneReport:
    """One pass: rows deleted, DELETE statements run, and where to resume (an id; for asks, a
    (created_at, id) pair), None when the walk reached rows newer than the cutoff or the table's
    end: the next pass starts from the oldest."""

    deleted: int
    batches: int
    resume_after: Any


def audit_prune(*, now: datetime | None = None, after: int | None = None) -> PruneReport:
    """Delete audit rows of asks closed more than ``ASKCARDS_AUDIT_RETENTION_DAYS`` ago (the row
    itself older than that too: a click rejected yesterday on a long-closed ask stays for now)."""
    days = settings.ASKCARDS_AUDIT_RETENTION_DAYS
    if not days:
        return PruneReport(0, 0, None)
    cutoff = (now or timezone.now()) - timedelta(days=days)
    # closed_at is set exactly when an ask is terminal (ask_reason_matches_status): an open ask's
    # rows never match.
    safe = Q(created_at__lt=cutoff, ask__closed_at__lt=cutoff)
    return _prune(AskEvent, safe, cutoff, after)


def outbox_prune(*, now: datetime | None = None, after: int | None = None) -> PruneReport:
    """Delete outbox events delivered (webhook, feed or response) or given up more than
    ``ASKCARDS_EVENT_RETENTION_DAYS`` ago; an event still to be delivered is never touched."""
    days = settings.ASKCARDS_EVENT_RETENTION_DAYS
    if not days:
        return PruneReport(0, 0, None)
    cutoff = (now or timezone.now()) - timedelta(days=days)
    safe = Q(delivered_at__lt=cutoff) | Q(delivered_at__isnull=True, failed_at__lt=cutoff)
    return _prune(OutboxEvent, safe, cutoff, after)


def receipts_prune(*, now: datetime | None = None, after: int | None = None) -> PruneReport:
    """Delete callback receipts older than ``CALLBACK_RECEIPT_TTL`` (always on: unlike the
    retention settings, the receipts' lifetime is the platforms' re-delivery window)."""
    cutoff = (now or timezone.now()) - CALLBACK_RECEIPT_TTL
    return _prune(CallbackReceipt, Q(created_at__lt=cutoff), cutoff, after)


def _prune(model: type[Row], safe: Q, cutoff: datetime, after: int | None) -> PruneReport:
    size = settings.ASKCARDS_PRUNE_BATCH
    rows = model._default_manager
    if after is None:
        oldest = rows.order_by("pk").values_list("pk", flat=True).first()
        if oldest is None:
            return PruneReport(0, 0, None)
        after = oldest - 1
    newest = rows.order_by("-pk").values_list("pk", flat=True).first() or 0
    deleted = batches = 0
    for _ in range(settings.ASKCARDS_PRUNE_BATCHES_PER_PASS):
        if after >= newest:
            return PruneReport(deleted, batches, None)
        end = after + size
        window = (
            rows.filter(pk__gt=after, pk__lte=end)
            .annotate(safe=Case(When(safe, then=True), default=False, output_field=BooleanField()))
            .values_list("pk", "safe", "created_at")
        )
        ids, newer = [], False
        for pk, prunable, created_at in window:
            if prunable:
                ids.append(pk)
            newer = newer or created_at >= cutoff
        if ids:
            # No cascades or signals on these models: Django deletes them in one statement.
            deleted += _delete(model, ids)
            batches += 1
        if newer:
            return PruneReport(deleted, batches, None)
        after = end
    return PruneReport(deleted, batches, after)


def _delete(model: type[models.Model], ids: list[int]) -> int:
    return model._default_manager.filter(pk__in=ids).delete()[0]


def asks_prune(*, now: datetime | None = None, after: tuple[datetime, str] | None = None) -> PruneReport:
    """Delete asks that closed more than ``ASKCARDS_ASK_RETENTION_DAYS`` ago (0 keeps them
    forever), with what belongs to them: respondents and their answers, card messages, audit rows
    and agent events. An open ask is never touched, nor one whose ``ask.closed`` event the agent
    has still to receive (undelivered and not given up): its result is not lost to retention.

    The asks are walked oldest first through the created-at index (an ask closes after it is
    created, so every candidate was created before the cutoff), ``ASKCARDS_PRUNE_BATCH`` at a time,
    each batch deleted in its own short transaction. What the deleted rows counted on ``/metrics``
    is added to ``PrunedTally`` in that same transaction, so the counters read from the database
    never go down. ``after`` resumes a walk (the returned ``resume_after``), so asks that must stay
    are stepped over once per walk, not on every pass."""
    days = settings.ASKCARDS_ASK_RETENTION_DAYS
    if not days:
        return PruneReport(0, 0, None)
    cutoff = (now or timezone.now()) - timedelta(days=days)
    size = settings.ASKCARDS_PRUNE_BATCH
    undelivered = OutboxEvent.objects.filter(ask=OuterRef("pk"), delivered_at__isnull=True, failed_at__isnull=True)
    prunable = Q(closed_at__lt=cutoff) & ~Exists(undelivered)
    deleted = batches = 0
    for _ in range(settings.ASKCARDS_PRUNE_BATCHES_PER_PASS):
        rows = Ask.objects.filter(created_at__lt=cutoff)
        if after is not None:
            rows = rows.filter(Q(created_at__gt=after[0]) | Q(created_at=after[0], pk__gt=after[1]))
        window = list(
            rows.order_by("created_at", "pk")
            .annotate(safe=Case(When(prunable, then=True), default=False, output_field=BooleanField()))
            .values_list("pk", "created_at", "safe")[:size]
        )
        if not window:
            return PruneReport(deleted, batches, None)
        ids = [pk for pk, _, safe in window if safe]
        if ids:
            deleted += _delete_asks(ids, cutoff)
            batches += 1
        if len(window) < size:
            return PruneReport(deleted, batches, None)
        after = (window[-1][1], window[-1][0])
    return PruneReport(deleted, batches, after)


def _delete_asks(ids: list[str], cutoff: datetime) -> int:
    """Delete these asks (still closed before ``cutoff``) and tally what they counted. The rows are
    locked first (PostgreSQL; SQLite serialises writers), so a second worker pruning the same
    window tallies and deletes nothing twice."""
    with transaction.atomic():
        locked = Ask.objects.filter(pk__in=ids, closed_at__lt=cutoff)
        if connection.features.has_select_for_update_skip_locked:
            locked = locked.select_for_update(skip_locked=True, of=("self",))
        ids = list(locked.values_list("pk", flat=True))
        if not ids:
            return 0
        asks = (
            Ask.objects.filter(pk__in=ids).order_by()
            .values_list("tool", "session__platform", "status", "reason").annotate(n=Count("pk"))
        )
        responses = (
            Respondent.objects.filter(ask_id__in=ids).exclude(surface="").order_by()
            .values_list("ask__tool", "surface", "status").annotate(n=Count("pk"))
        )
        for metric, rows in ((PrunedTally.Metric.ASKS, asks), (PrunedTally.Metric.RESPONSES, responses)):
            for *labels, n in rows:
                _tally(metric, "|".join(labels), n)
        return Ask.objects.filter(pk__in=ids).delete()[1].get(Ask._meta.label, 0)


def _tally(metric: str, labels: str, n: int) -> None:
    if not PrunedTally.objects.filter(metric=metric, labels=labels).update(count=F("count") + n):
        try:
            with transaction.atomic():
                PrunedTally.objects.create(metric=metric, labels=labels, count=n)
        except IntegrityError:  # another worker made the row meanwhile
            PrunedTally.objects.filter(metric=metric, labels=labels).update(count=F("count") + n)
