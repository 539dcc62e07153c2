"""Bounded growth: old audit rows, delivered outbox events and callback receipts are pruned in
batches, and only what is safe to drop (services.retention)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from askcards import services
from askcards.models import Ask, AskEvent, CallbackReceipt, OutboxEvent
from askcards import worker as worker_module
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


def receipts(count: int, created_at, prefix: str = "ev") -> list[int]:
    rows = CallbackReceipt.objects.bulk_create(
        CallbackReceipt(platform="feishu", event_id=f"{prefix}-{n}", created_at=created_at) for n in range(count)
    )
    return [row.pk for row in rows]


def test_receipts_prune_deletes_in_batches_and_keeps_recent_ones(db, settings):
    settings.ASKCARDS_PRUNE_BATCH = 10
    receipts(25, NOW - timedelta(days=2), "old")
    receipts(1, NOW - timedelta(hours=1), "fresh")
    with CaptureQueriesContext(connection) as queries:
        report = services.receipts_prune(now=NOW)
    statements = deletes(queries, "askcards_callbackreceipt")
    assert (report.deleted, report.batches, report.resume_after) == (25, 3, None)
    assert [sql.split(" IN (")[1].count(",") + 1 for sql in statements] == [10, 10, 5]
    assert list(CallbackReceipt.objects.values_list("event_id", flat=True)) == ["fresh-0"]


def test_receipts_are_kept_for_as_long_as_a_platform_may_deliver_again(db, settings):
    # Feishu re-delivers within minutes; a DingTalk signature pair is acceptable for 2 × the skew,
    # at most two hours (settings caps the skew at an hour): a receipt outlives both.
    assert services.CALLBACK_RECEIPT_TTL >= timedelta(seconds=2 * 3600)
    kept = receipts(3, NOW - services.CALLBACK_RECEIPT_TTL + timedelta(minutes=1))
    assert services.receipts_prune(now=NOW).deleted == 0
    assert services.receipts_prune(now=NOW + timedelta(minutes=2)).deleted == len(kept)


def test_receipts_prune_resumes_where_a_capped_pass_stopped(db, settings):
    settings.ASKCARDS_PRUNE_BATCH, settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 10, 2
    receipts(30, NOW - timedelta(days=2))
    first = services.receipts_prune(now=NOW)
    with CaptureQueriesContext(connection) as queries:
        second = services.receipts_prune(now=NOW, after=first.resume_after)
    assert (first.deleted, first.resume_after is not None, second.deleted) == (20, True, 10)
    # The second pass starts at the first one's cursor, not at the table's oldest row.
    window = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")][1]
    assert f"> {first.resume_after}" in window
    assert CallbackReceipt.objects.count() == 0


def test_receipts_prune_stops_at_receipts_newer_than_the_cutoff(db, settings):
    settings.ASKCARDS_PRUNE_BATCH = 5
    receipts(5, NOW - timedelta(days=2), "old")
    receipts(40, NOW - timedelta(hours=1), "new")
    with CaptureQueriesContext(connection) as queries:
        report = services.receipts_prune(now=NOW)
    windows = [q for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    # The oldest and newest ids, then two windows: the second holds only new receipts and ends the walk.
    assert (report.deleted, report.resume_after, len(windows)) == (5, None, 4)
    assert CallbackReceipt.objects.count() == 40


def test_worker_housekeeping_prunes_old_audit_rows_events_and_receipts(agent, web_session):
    old_closed = make_ask(agent, web_session, closed_at=OLD)
    audit_rows(old_closed, 2, OLD)
    outbox_rows(agent, 2, delivered_at=OLD, delivered_via="webhook")
    undelivered = outbox_rows(agent, 1)
    receipts(3, OLD, "old")
    fresh = receipts(1, timezone.now(), "fresh")
    assert Worker().housekeeping() == 7
    assert (AskEvent.objects.count(), list(OutboxEvent.objects.values_list("pk", flat=True))) == (0, undelivered)
    assert list(CallbackReceipt.objects.values_list("pk", flat=True)) == fresh


def test_worker_housekeeping_resumes_each_walk_where_its_last_pass_stopped(agent, settings, monkeypatch):
    monkeypatch.setattr(worker_module, "HOUSEKEEPING_EVERY", timedelta(0))
    settings.ASKCARDS_PRUNE_BATCH, settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 10, 1
    # An agent that never reads its feed: its oldest events stay, and are stepped over once.
    undelivered = outbox_rows(agent, 10)
    outbox_rows(agent, 10, delivered_at=OLD, delivered_via="webhook")
    receipts(20, OLD)
    worker = Worker()
    passes = [worker.housekeeping() for _ in range(3)]
    assert passes == [10, 20, 0]  # receipts; the delivered events and the other receipts; nothing
    assert (list(OutboxEvent.objects.values_list("pk", flat=True)), CallbackReceipt.objects.count()) == (undelivered, 0)


# ------------------------------------------------------------------------------------------ asks

ANCIENT = NOW - timedelta(days=400)  # past the default ask retention (180 days)


def answered_ask(agent, session, *, closed_at, delivered=True, given_up=False) -> Ask:
    """A closed ask as the lifecycle leaves it: a respondent who answered, a card, audit rows and
    its ask.closed event (delivered, given up, or still waiting)."""
    from askcards.models import Bot, CardMessage, Respondent

    ask = make_ask(agent, session, closed_at=closed_at, created_at=closed_at - timedelta(minutes=5))
    Respondent.objects.create(ask=ask, respondent_id="alice", respondent_key="alice", status="submitted",
                              answers={"answers": []}, answered_at=closed_at, surface="web")
    bot, _ = Bot.objects.get_or_create(platform="dingtalk", app_id="ding_retention", defaults={"base_url": "https://x"})
    CardMessage.objects.create(platform="dingtalk", bot=bot, ask=ask, message_id=f"ask_{ask.pk}")
    audit_rows(ask, 2, closed_at)
    seq = OutboxEvent.objects.filter(agent=agent).count() + 1
    OutboxEvent.objects.create(
        agent=agent, seq=seq, type="ask.closed", ask=ask, created_at=closed_at,
        delivered_at=closed_at if delivered and not given_up else None, failed_at=closed_at if given_up else None,
    )
    return ask


def test_asks_closed_before_the_retention_go_with_everything_that_belongs_to_them(agent, web_session, settings):
    from askcards.models import CardMessage, Respondent

    settings.ASKCARDS_ASK_RETENTION_DAYS = 180
    gone = [answered_ask(agent, web_session, closed_at=ANCIENT),
            answered_ask(agent, web_session, closed_at=ANCIENT, delivered=False, given_up=True)]
    waiting = answered_ask(agent, web_session, closed_at=ANCIENT, delivered=False)  # the agent never got it
    recent = answered_ask(agent, web_session, closed_at=RECENT)
    still_open = make_ask(agent, web_session, created_at=ANCIENT)  # open (no worker ran): never pruned

    report = services.asks_prune(now=NOW)
    assert (report.deleted, report.resume_after) == (2, None)
    assert set(Ask.objects.values_list("pk", flat=True)) == {waiting.pk, recent.pk, still_open.pk}
    for model in (Respondent, CardMessage, AskEvent, OutboxEvent):
        assert not model.objects.filter(ask__in=gone).exists(), model.__name__
        assert model.objects.filter(ask=waiting).exists(), model.__name__


def test_ask_retention_zero_keeps_every_ask(agent, web_session, settings):
    settings.ASKCARDS_ASK_RETENTION_DAYS = 0
    answered_ask(agent, web_session, closed_at=ANCIENT)
    assert services.asks_prune(now=NOW).deleted == 0
    assert Ask.objects.count() == 1


def test_ask_prune_walks_in_batches_and_resumes_past_asks_that_must_stay(agent, web_session, settings):
    settings.ASKCARDS_ASK_RETENTION_DAYS = 180
    settings.ASKCARDS_PRUNE_BATCH, settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 3, 2
    kept = [answered_ask(agent, web_session, closed_at=ANCIENT - timedelta(hours=10 - n), delivered=False).pk
            for n in range(4)]  # the oldest: an agent that never read these results
    for n in range(5):
        answered_ask(agent, web_session, closed_at=ANCIENT + timedelta(hours=n))
    first = services.asks_prune(now=NOW)
    assert (first.deleted, first.batches) == (2, 1)  # window 1: three kept; window 2: one kept, two gone
    assert first.resume_after is not None
    second = services.asks_prune(now=NOW, after=first.resume_after)
    assert (second.deleted, second.resume_after) == (3, None)
    assert sorted(Ask.objects.values_list("pk", flat=True)) == sorted(kept)


def test_worker_housekeeping_prunes_old_asks(agent, web_session, settings):
    settings.ASKCARDS_ASK_RETENTION_DAYS = 180
    answered_ask(agent, web_session, closed_at=ANCIENT)
    Worker().housekeeping()
    assert not Ask.objects.exists()
