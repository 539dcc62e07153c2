"""What each hand-written statement of ``askcards.db.statements`` does, on the configured database
(SQLite by default, PostgreSQL with DATABASE_URL)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from askcards import services
from askcards.db import statements
from askcards.models import Agent, Bot, CallbackReceipt, CardMessage, OutboxEvent, ProgressCard
from tests.db.test_append_row import stored_columns


@pytest.fixture
def feishu_bot(db) -> Bot:
    return services.bot_add(platform="feishu", app_id="cli_statements", app_secret="app-secret-PLAINTEXT")


# ------------------------------------------------------------------------------- the outbox


def test_outbox_event_insert_numbers_an_agents_events_one_after_another(agent, other_agent):
    for _ in range(3):
        statements.outbox_event_insert(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    statements.outbox_event_insert(agent_id=other_agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    assert list(OutboxEvent.objects.filter(agent=agent).values_list("seq", flat=True)) == [1, 2, 3]
    assert list(OutboxEvent.objects.filter(agent=other_agent).values_list("seq", flat=True)) == [1]


def test_outbox_event_insert_bumps_the_agents_counter(agent):
    statements.outbox_event_insert(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    statements.outbox_event_insert(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    assert Agent.objects.values_list("event_seq", flat=True).get(pk=agent.pk) == 2


def test_outbox_event_insert_keeps_next_attempt_only_with_a_webhook(agent, other_agent):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    due = timezone.now()
    statements.outbox_event_insert(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS, next_attempt_at=due)
    statements.outbox_event_insert(agent_id=other_agent.pk, type=OutboxEvent.Type.ASK_PROGRESS, next_attempt_at=due)
    assert OutboxEvent.objects.get(agent=agent).next_attempt_at == due
    assert OutboxEvent.objects.get(agent=other_agent).next_attempt_at is None


def test_outbox_event_insert_stores_what_create_stores_with_the_bumped_seq(agent, pending_ask):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook", event_seq=41)
    values = {
        "type": OutboxEvent.Type.ASK_CLOSED,
        "ask": pending_ask,
        "session": pending_ask.session,
        "data": {"status": "answered", "reason": "submitted", "说明": "已提交"},
        "created_at": timezone.now() - timedelta(seconds=3),
        "next_attempt_at": timezone.now(),
    }
    created = OutboxEvent.objects.create(agent=agent, seq=42, **values)
    by_create = stored_columns(OutboxEvent, created.pk)
    created.delete()
    statements.outbox_event_insert(agent_id=agent.pk, **values)
    assert stored_columns(OutboxEvent, OutboxEvent.objects.get(agent=agent).pk) == by_create


def test_outbox_event_insert_refuses_an_unknown_agent(db):
    with pytest.raises(Agent.DoesNotExist), transaction.atomic():
        statements.outbox_event_insert(agent_id=999_999, type=OutboxEvent.Type.ASK_PROGRESS)
    assert not OutboxEvent.objects.exists()


# ---------------------------------------------------------------------- platform callbacks


def test_callback_receipt_insert_accepts_an_event_id_once(db):
    now = timezone.now()
    assert statements.callback_receipt_insert(platform="feishu", event_id="ev_1", created_at=now) is True
    assert statements.callback_receipt_insert(platform="feishu", event_id="ev_1", created_at=now) is False
    assert CallbackReceipt.objects.filter(event_id="ev_1").count() == 1


def test_callback_receipt_insert_keeps_platforms_apart(db):
    now = timezone.now()
    assert statements.callback_receipt_insert(platform="feishu", event_id="ev_1", created_at=now)
    assert statements.callback_receipt_insert(platform="dingtalk", event_id="ev_1", created_at=now)


def test_callback_receipt_insert_stores_the_time_given(db):
    moment = timezone.now() - timedelta(hours=2)
    statements.callback_receipt_insert(platform="feishu", event_id="ev_old", created_at=moment)
    assert CallbackReceipt.objects.get(event_id="ev_old").created_at == moment


def test_callback_receipt_insert_duplicate_leaves_the_transaction_usable(db):
    now = timezone.now()
    statements.callback_receipt_insert(platform="feishu", event_id="ev_1", created_at=now)
    with transaction.atomic():
        assert not statements.callback_receipt_insert(platform="feishu", event_id="ev_1", created_at=now)
        statements.callback_receipt_insert(platform="feishu", event_id="ev_2", created_at=now)
    assert set(CallbackReceipt.objects.values_list("event_id", flat=True)) == {"ev_1", "ev_2"}


# ---------------------------------------------------------------------------- card messages


@pytest.fixture
def card(web_session) -> ProgressCard:
    return ProgressCard.objects.create(session=web_session)


@pytest.fixture
def message(card, feishu_bot) -> CardMessage:
    return CardMessage.objects.create(platform="feishu", bot=feishu_bot, progress_card=card, message_id="om_1", version=1)


def test_card_message_claim_wins_once(message):
    now = timezone.now()
    until = now + timedelta(seconds=30)
    assert statements.card_message_claim(message.pk, until=until, now=now) is True
    assert statements.card_message_claim(message.pk, until=until, now=now) is False
    message.refresh_from_db()
    assert message.next_sync_at == until


def test_card_message_claim_takes_a_lapsed_claim(message):
    now = timezone.now()
    CardMessage.objects.filter(pk=message.pk).update(next_sync_at=now - timedelta(seconds=1))
    assert statements.card_message_claim(message.pk, until=now + timedelta(seconds=30), now=now)


def test_card_message_claim_skips_a_message_in_sync(message):
    CardMessage.objects.filter(pk=message.pk).update(synced_version=1)
    now = timezone.now()
    assert not statements.card_message_claim(message.pk, until=now + timedelta(seconds=30), now=now)


def test_card_message_claim_skips_a_message_not_due_yet(message):
    now = timezone.now()
    CardMessage.objects.filter(pk=message.pk).update(next_sync_at=now + timedelta(milliseconds=200))
    assert not statements.card_message_claim(message.pk, until=now + timedelta(seconds=30), now=now)


def test_card_message_claim_refuses_when_an_unchanged_field_changed(message):
    now = timezone.now()
    until = now + timedelta(seconds=30)
    assert not statements.card_message_claim(message.pk, until=until, now=now, message_id="om_other")
    assert statements.card_message_claim(message.pk, until=until, now=now, message_id="om_1")


def test_progress_card_mark_bumps_the_sessions_latest_card_only(web_session, card, message, feishu_bot):
    newer = ProgressCard.objects.create(session=web_session)
    newer_message = CardMessage.objects.create(platform="feishu", bot=feishu_bot, progress_card=newer, message_id="om_2")
    assert statements.progress_card_mark(session_id=web_session.pk) == 1
    assert CardMessage.objects.get(pk=newer_message.pk).version == 1
    assert CardMessage.objects.get(pk=message.pk).version == 1  # unchanged


def test_progress_card_mark_bumps_again_on_each_call(web_session, message):
    statements.progress_card_mark(session_id=web_session.pk)
    statements.progress_card_mark(session_id=web_session.pk)
    assert CardMessage.objects.get(pk=message.pk).version == 3


def test_progress_card_mark_without_a_card_marks_nothing(web_session):
    assert statements.progress_card_mark(session_id=web_session.pk) == 0
