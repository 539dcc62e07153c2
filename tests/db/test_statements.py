"""What each hand-written statement of ``askcards.db.statements`` does, on the configured database
(SQLite by default, PostgreSQL with DATABASE_URL)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from askcards import outbox, services
from askcards.db import statements
from askcards.models import Agent, Bot, CardMessage, OutboxEvent, ProgressCard


@pytest.fixture
def feishu_bot(db) -> Bot:
    return services.bot_add(platform="feishu", app_id="cli_statements", app_secret="app-secret-PLAINTEXT")


# ------------------------------------------------------------------------------- the outbox


def test_agent_event_seq_bump_numbers_an_agents_events_one_after_another(agent, other_agent):
    assert [statements.agent_event_seq_bump(agent.pk)[0] for _ in range(3)] == [1, 2, 3]
    assert statements.agent_event_seq_bump(other_agent.pk)[0] == 1
    assert Agent.objects.values_list("event_seq", flat=True).get(pk=agent.pk) == 3


def test_agent_event_seq_bump_returns_the_agents_webhook_url(agent, other_agent):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    assert statements.agent_event_seq_bump(agent.pk)[1] == "https://agent.example.com/hook"
    assert statements.agent_event_seq_bump(other_agent.pk)[1] == ""


def test_agent_event_seq_bump_refuses_an_unknown_agent(db):
    with pytest.raises(Agent.DoesNotExist):
        statements.agent_event_seq_bump(999_999)


def test_outbox_event_insert_refuses_an_unknown_agent(db):
    with pytest.raises(Agent.DoesNotExist), transaction.atomic():
        statements.outbox_event_insert(agent_id=999_999, type=OutboxEvent.Type.ASK_PROGRESS)
    assert not OutboxEvent.objects.exists()


def test_outbox_append_numbers_an_agents_events_one_after_another(agent, other_agent):
    with transaction.atomic():
        for _ in range(3):
            outbox.append(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
        outbox.append(agent_id=other_agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    assert list(OutboxEvent.objects.filter(agent=agent).values_list("seq", flat=True)) == [1, 2, 3]
    assert list(OutboxEvent.objects.filter(agent=other_agent).values_list("seq", flat=True)) == [1]


def test_outbox_append_schedules_delivery_only_with_a_webhook(agent, other_agent):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    with transaction.atomic():
        outbox.append(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS, data={"说明": "进行中"})
        outbox.append(agent_id=other_agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    assert OutboxEvent.objects.get(agent=agent).next_attempt_at is not None
    assert OutboxEvent.objects.get(agent=agent).data == {"说明": "进行中"}
    assert OutboxEvent.objects.get(agent=other_agent).next_attempt_at is None


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
