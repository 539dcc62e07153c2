"""The hand-written INSERT stores exactly what ``objects.create`` stores: ``outbox_event_insert``
(``OutboxEvent``; on PostgreSQL one statement with the agent's bump, every value cast to its
column's type). Audit rows (``AskEvent``) are written by the ORM: a hand-written INSERT saved
under 2 % of a Feishu submit (docs/performance.md).

Each case creates a row through the ORM, reads its columns as stored, deletes it, inserts one with
the same arguments and reads that: every column but the primary key must be equal as stored (the
JSON text on SQLite, the converted datetimes, the defaults). Runs on the configured database:
SQLite by default, PostgreSQL with DATABASE_URL.
"""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.utils import timezone

from askcards.db import statements
from askcards.db.statements import insert_fields, quote
from askcards.models import Agent, OutboxEvent

SHANGHAI = ZoneInfo("Asia/Shanghai")


def stored_columns(model, pk: int) -> dict:
    """Every column of the row but the primary key, exactly as the database returns it."""
    columns = [field.column for field in insert_fields(model)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(quote(connection, column) for column in columns)} "
            f"FROM {quote(connection, model._meta.db_table)} WHERE {quote(connection, 'id')} = %s",
            [pk],
        )
        return dict(zip(columns, cursor.fetchone()))


@pytest.fixture
def ask(pending_ask):
    return pending_ask


def assert_outbox_event_as_created(agent, values: dict) -> None:
    """``outbox_event_insert(agent_id=…, **values)`` stores what ``OutboxEvent.objects.create``
    stores with the bumped ``seq`` (and ``next_attempt_at`` dropped for an agent without webhook)."""
    started = timezone.now()
    webhook = Agent.objects.values_list("webhook_url", flat=True).get(pk=agent.pk)
    expected = {**values, "seq": 42}
    if not webhook:
        expected["next_attempt_at"] = None
    created = OutboxEvent.objects.create(agent_id=agent.pk, **expected)
    by_create = stored_columns(OutboxEvent, created.pk)
    created.delete()
    Agent.objects.filter(pk=agent.pk).update(event_seq=41)
    statements.outbox_event_insert(agent_id=agent.pk, **values)
    inserted = OutboxEvent.objects.get(agent=agent)
    by_insert = stored_columns(OutboxEvent, inserted.pk)
    if "created_at" not in values:
        assert started <= created.created_at <= inserted.created_at <= timezone.now()
        del by_create["created_at"], by_insert["created_at"]
    assert by_insert == by_create


def test_outbox_event_defaults_stored_as_create_stores_them(agent):
    assert_outbox_event_as_created(agent, {"type": OutboxEvent.Type.ASK_CLOSED})


def test_outbox_event_every_field_stored_as_create_stores_it(agent, ask):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    moment = datetime(2026, 12, 1, 9, 30, 15, 654321, tzinfo=SHANGHAI)
    assert_outbox_event_as_created(
        agent,
        {
            "type": OutboxEvent.Type.SESSION_CANCEL_REQUESTED,
            "ask": ask,
            "session": ask.session,
            "data": {"status": "cancelled", "by": "operator:张三", "counts": {"asks": 3}, "none": None},
            "created_at": moment,
            "attempts": 3,
            "next_attempt_at": moment,
            "claimed_until": datetime(2026, 12, 1, 1, 31, tzinfo=ZoneInfo("UTC")),
            "delivered_at": moment,
            "delivered_via": "webhook",
            "failed_at": moment,
            "last_error": "HTTP 503",
        },
    )


def test_outbox_event_without_webhook_stored_as_create_stores_it(agent, ask):
    assert_outbox_event_as_created(
        agent,
        {"type": OutboxEvent.Type.ASK_PROGRESS, "ask_id": ask.pk, "data": {}, "next_attempt_at": timezone.now()},
    )
