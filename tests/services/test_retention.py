"""Bounded growth: old audit rows, delivered outbox events and callback receipts are pruned in
batches, and only what is safe to drop (services.retention, sessions.callback_receipts_purge)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from askcards import services
from askcards.models import Ask, AskEvent, CallbackReceipt, OutboxEvent
from askcards.worker import Worker

NOW = timezone.now()
OLD = NOW - timedelta(days=120)  # past both default retentions (90 days audit, 30 days events)
RECENT = NOW - timedelta(days=3)


@pytest.fixture(autouse=True)
def retention(settings):
    settings.ASKCARDS_AUDIT_RETENTION_DAYS = 90
    settings.ASKCARDS_EVENT_RETENTION_DAYS = 30
    settings.ASKCARDS_PRUNE_BATCH = 2000
    settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 50


def make_ask(agent, session, *, closed_at=None, created_at=OLD) -> Ask:
    closed = {"status": "answered", "reason": "submitted", "closed_at": closed_at} if closed_at else {"status": "pending"}
    return Ask.objects.create(
        agent=agent, session=session, tool="ask_user_questions", deadline=created_at + timedelta(hours=1),
        created_at=created_at, **closed,
    )


def audit_rows(ask, count: int, created_at) -> list[int]:
    rows = AskEvent.objects.bulk_create(
        AskEvent(ask=ask, kind="created", to_status="pending", actor="system", created_at=created_at) for _ in range(count)
    )
    return [row.pk for row in rows]


def outbox_rows(agent, count: int, **fields) -> list[int]:
    start = OutboxEvent.objects.filter(agent=agent).count()
    rows = OutboxEvent.objects.bulk_create(
        OutboxEvent(agent=agent, seq=start + number + 1, type="ask.closed", created_at=OLD, **fields)
        for number in range(count)
    )
    return [row.pk for row in rows]


def deletes(queries, table: str) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE") and table in q["sql"]]


def test_audit_prune_drops_rows_of_asks_closed_before_the_retention(agent, web_session):
    old_closed = make_ask(agent, web_session, closed_at=OLD + timedelta(hours=1))
    audit_rows(old_closed, 3, OLD)
    report = services.audit_prune(now=NOW)
    assert (report.deleted, AskEvent.objects.filter(ask=old_closed).count()) == (3, 0)


def test_audit_prune_keeps_rows_of_an_open_ask_however_old(agent, web_session):
    still_open = make_ask(agent, web_session)
    kept = audit_rows(still_open, 2, OLD)
    assert services.audit_prune(now=NOW).deleted == 0
    assert sorted(AskEvent.objects.values_list("pk", flat=True)) == kept


def test_audit_prune_keeps_rows_of_an_ask_closed_within_the_retention(agent, web_session):
    lately_closed = make_ask(agent, web_session, closed_at=RECENT)
    kept = audit_rows(lately_closed, 2, OLD)
    assert services.audit_prune(now=NOW).deleted == 0
    assert sorted(AskEvent.objects.values_list("pk", flat=True)) == kept


def test_audit_prune_keeps_a_recent_row_of_a_long_closed_ask(agent, web_session):
    old_closed = make_ask(agent, web_session, closed_at=OLD)
    audit_rows(old_closed, 2, OLD)
    late_click = audit_rows(old_closed, 1, RECENT)
    assert services.audit_prune(now=NOW).deleted == 2
    assert list(AskEvent.objects.values_list("pk", flat=True)) == late_click


def test_audit_prune_with_zero_retention_keeps_everything(agent, web_session, settings):
    settings.ASKCARDS_AUDIT_RETENTION_DAYS = 0
    audit_rows(make_ask(agent, web_session, closed_at=OLD), 2, OLD)
    assert (services.audit_prune(now=NOW).deleted, AskEvent.objects.count()) == (0, 2)


def test_audit_prune_deletes_in_batches_of_the_configured_size(agent, web_session, settings):
    settings.ASKCARDS_PRUNE_BATCH = 10
    audit_rows(make_ask(agent, web_session, closed_at=OLD), 35, OLD)
    with CaptureQueriesContext(connection) as queries:
        report = services.audit_prune(now=NOW)
    statements = deletes(queries, "askcards_askevent")
    assert (report.deleted, report.batches, len(statements), AskEvent.objects.count()) == (35, 4, 4, 0)
    assert [sql.split(" IN (")[1].count(",") + 1 for sql in statements] == [10, 10, 10, 5]


def test_audit_prune_resumes_where_a_capped_pass_stopped(agent, web_session, settings):
    settings.ASKCARDS_PRUNE_BATCH, settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 10, 2
    audit_rows(make_ask(agent, web_session, closed_at=OLD), 30, OLD)
    first = services.audit_prune(now=NOW)
    second = services.audit_prune(now=NOW, after=first.resume_after)
    assert (first.deleted, first.resume_after is not None, second.deleted) == (20, True, 10)
    assert AskEvent.objects.count() == 0


def test_audit_prune_stops_at_rows_newer_than_the_cutoff(agent, web_session, settings):
    settings.ASKCARDS_PRUNE_BATCH = 5
    old_closed = make_ask(agent, web_session, closed_at=OLD)
    audit_rows(old_closed, 5, OLD)
    audit_rows(old_closed, 40, RECENT)
    with CaptureQueriesContext(connection) as queries:
        report = services.audit_prune(now=NOW)
    windows = [q for q in queries.captured_queries if q["sql"].startswith("SELECT") and "askcards_askevent" in q["sql"]]
    # The oldest and newest ids, then two windows: the second holds only new rows and ends the walk.
    assert (report.deleted, report.resume_after, len(windows)) == (5, None, 4)


def test_outbox_prune_drops_events_delivered_or_given_up_before_the_retention(agent):
    outbox_rows(agent, 2, delivered_at=OLD, delivered_via="webhook")
    outbox_rows(agent, 1, failed_at=OLD)
    assert (services.outbox_prune(now=NOW).deleted, OutboxEvent.objects.count()) == (3, 0)


def test_outbox_prune_never_drops_an_undelivered_event(agent):
    kept = outbox_rows(agent, 3, next_attempt_at=OLD)
    assert services.outbox_prune(now=NOW).deleted == 0
    assert sorted(OutboxEvent.objects.values_list("pk", flat=True)) == kept


def test_outbox_prune_keeps_events_delivered_within_the_retention(agent):
    kept = outbox_rows(agent, 2, delivered_at=RECENT, delivered_via="feed")
    gone = outbox_rows(agent, 2, delivered_at=OLD, delivered_via="feed")
    assert services.outbox_prune(now=NOW).deleted == len(gone)
    assert sorted(OutboxEvent.objects.values_list("pk", flat=True)) == kept


def test_outbox_prune_deletes_in_batches(agent, settings):
    settings.ASKCARDS_PRUNE_BATCH = 4
    outbox_rows(agent, 10, delivered_at=OLD, delivered_via="webhook")
    with CaptureQueriesContext(connection) as queries:
        report = services.outbox_prune(now=NOW)
    assert (report.deleted, len(deletes(queries, "askcards_outboxevent"))) == (10, 3)


def test_callback_receipts_purge_deletes_in_batches_and_keeps_recent_ones(db, settings):
    settings.ASKCARDS_PRUNE_BATCH = 10
    CallbackReceipt.objects.bulk_create(
        CallbackReceipt(platform="feishu", event_id=f"old-{n}", created_at=NOW - timedelta(days=2)) for n in range(25)
    )
    CallbackReceipt.objects.create(platform="feishu", event_id="fresh", created_at=NOW - timedelta(hours=1))
    with CaptureQueriesContext(connection) as queries:
        dropped = services.callback_receipts_purge(now=NOW)
    assert (dropped, len(deletes(queries, "askcards_callbackreceipt"))) == (25, 3)
    assert list(CallbackReceipt.objects.values_list("event_id", flat=True)) == ["fresh"]


def test_worker_housekeeping_prunes_old_audit_rows_and_events(agent, web_session):
    old_closed = make_ask(agent, web_session, closed_at=OLD)
    audit_rows(old_closed, 2, OLD)
    outbox_rows(agent, 2, delivered_at=OLD, delivered_via="webhook")
    undelivered = outbox_rows(agent, 1)
    assert Worker().housekeeping() == 4
    assert (AskEvent.objects.count(), list(OutboxEvent.objects.values_list("pk", flat=True))) == (0, undelivered)
