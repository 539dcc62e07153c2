"""The panel racing the agent API's cancel and the deadline (issue 3, SPEC §5 rule 1).

Each round: two panels of the same user show one ask; the first submits an answer while, at the
same moment, the agent cancels it over the HTTP API (or the worker's deadline sweep fires) from
another thread. Exactly one of them wins, the ask's one "closed" audit row and one outbox event
say which, the loser hears a clear non-error answer, and the second panel is told the winner's
reason once.
"""
from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent
from tests.conftest import answer_for
from tests.consumers.test_panel import _ask, _panel, users, web_surface  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ROUNDS = 8


def _api_cancel(key: str, ask_id: str) -> bool:
    try:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        response = client.post(f"/api/v1/asks/{ask_id}/cancel", {}, format="json")
        if response.status_code == 409:
            assert response.json()["error"]["code"] == "ask_not_pending"
            return False
        assert response.status_code == 200, response.content
        return True
    finally:
        connections.close_all()


def _deadline_sweep(ask_id: str) -> bool:
    try:
        return services.expire_due() == 1
    finally:
        connections.close_all()


async def _submit(panel, ask_id: str) -> list[dict]:
    """Submit from the panel; returns the three things it then hears, in any order: the ack, and
    (like every panel of the user) the ``ask_user_questions_cancelled`` saying how the ask ended
    and the ``history_add`` that lists it among the recent asks."""
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask_id, "answers": answer_for()})
    heard = [await panel.receive_json_from(timeout=10) for _ in range(3)]
    assert sorted(message["type"] for message in heard) == [
        "ask_user_questions_ack", "ask_user_questions_cancelled", "history_add"
    ]
    return heard


@database_sync_to_async
def _closing_record(ask_id: str):
    ask = Ask.objects.get(pk=ask_id)
    closed = AskEvent.objects.filter(ask_id=ask_id, kind=AskEvent.Kind.CLOSED).count()
    events = OutboxEvent.objects.filter(ask_id=ask_id, type=OutboxEvent.Type.ASK_CLOSED).count()
    return ask, closed, events


async def _race_rounds(agent, session, users, rival_name, rival, rival_reason):  # noqa: F811
    one, two = await _panel(users[0]), await _panel(users[0])
    winners = []
    for _ in range(ROUNDS):
        outcome = await _ask(agent, session)
        ask_id = outcome.ask.id
        for panel in (one, two):
            assert (await panel.receive_json_from(timeout=5))["requestId"] == ask_id
        if rival_name == "deadline":
            await database_sync_to_async(Ask.objects.filter(pk=ask_id).update)(deadline=timezone.now() - timedelta(seconds=1))
        heard, rival_won = await asyncio.gather(_submit(one, ask_id), asyncio.to_thread(rival, ask_id))
        ack = next(message for message in heard if message["type"] == "ask_user_questions_ack")
        ask, closed_rows, closed_events = await _closing_record(ask_id)
        assert ack["ok"] != rival_won, (ack, rival_won)  # exactly one winner
        assert (closed_rows, closed_events) == (1, 1)
        told = await two.receive_json_from(timeout=5)
        if ack["ok"]:
            assert (ask.status, ask.reason) == ("answered", "submitted")
            assert json.loads(ask.result["tool_result"])["answers"][0]["selectedLabels"] == ["PostgreSQL"]
            assert told == {"type": "ask_user_questions_cancelled", "requestId": ask_id, "reason": "submitted",
                            "surface": "web"}
            assert told in heard
            winners.append("panel")
        else:
            assert ack["error"] == "not_pending"
            assert ask.reason == rival_reason
            assert {"type": "ask_user_questions_cancelled", "requestId": ask_id, "reason": rival_reason} in heard
            assert told == {"type": "ask_user_questions_cancelled", "requestId": ask_id, "reason": rival_reason}
            winners.append(rival_name)
        history = await two.receive_json_from(timeout=5)
        assert history["type"] == "history_add" and history["ask"]["requestId"] == ask_id
        assert history["ask"]["answers"] == ([{"question": "Database", "answer": "PostgreSQL"}] if ack["ok"] else [])
        assert history in heard
        assert await two.receive_nothing(timeout=0.05)  # told once
    await one.disconnect()
    await two.disconnect()
    return winners


async def test_panel_answer_races_agent_api_cancel(web_surface, agent_and_key, web_session, users):  # noqa: F811
    agent, key = agent_and_key
    winners = await _race_rounds(agent, web_session, users, "cancel", lambda ask_id: _api_cancel(key, ask_id), "by_agent")
    assert len(winners) == ROUNDS


async def test_panel_answer_races_deadline(web_surface, agent, web_session, users):  # noqa: F811
    winners = await _race_rounds(agent, web_session, users, "deadline", _deadline_sweep, "timeout")
    assert len(winners) == ROUNDS
