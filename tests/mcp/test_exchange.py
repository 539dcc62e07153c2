"""A waiting call served as one exchange (askcards/mcp/exchange.py), through the real ASGI app."""
from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from askcards import services
from askcards.mcp import exchange
from askcards.models import Ask
from tests.conftest import QUESTIONS, answer_for
from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def _answer_when_pending():
    async with asyncio.timeout(10):
        while True:
            ask = await database_sync_to_async(Ask.objects.filter(status=Ask.Status.PENDING).first)()
            if ask is not None:
                break
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # long enough for a few keep-alives
    await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice", answers=answer_for(), surface="web")
    return ask


async def test_a_waiting_call_streams_keep_alives_then_its_answer(agent_and_key, present_session, monkeypatch):
    monkeypatch.setattr(exchange, "PING_SECONDS", 0.1)
    answering = asyncio.create_task(_answer_when_pending())
    answer = await wire.rpc(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}})
    ask = await answering
    body = answer.exchange.body.decode()
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert body.count(": ping") >= 2 and body.index(": ping") < body.index('"result"')
    assert answer.result["isError"] is False
    assert json.loads(answer.result["content"][0]["text"]) == {"answers": answer_for()}
    assert answer.result["structuredContent"]["ask"]["id"] == ask.id


async def test_an_immediate_answer_is_one_json_reply(agent_and_key, present_session):
    answer = await wire.rpc(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": []}})
    assert answer.headers["content-type"] == "application/json"
    assert answer.result["isError"] is True and "参数无效" in answer.result["content"][0]["text"]
