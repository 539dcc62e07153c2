"""Attacks on the host surface's response path (``askcards.mcp.host``): on the handshake revisions
the client answers an ``elicitation/create`` with a POST of its own, taken by any process with no
state but the request's id — the ask and its agent, signed. A forged, tampered, re-salted or
another agent's id is refused (400, JSON-RPC -32600) and changes nothing; so is a result that is
no elicitation result (-32602). Only the genuine id, under its own agent's key, answers the ask."""
from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.core import signing

from askcards import services
from askcards.mcp import host, results
from askcards.models import Ask, AskEvent
from tests.conftest import grant
from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ANSWER = {"action": "accept", "content": {"q1": "SQLite"}}


def _state(ask_id: str) -> tuple[str, str, int]:
    ask = Ask.objects.get(pk=ask_id)
    return ask.status, ask.reason, AskEvent.objects.filter(ask_id=ask_id).count()


def _other_agents_key() -> str:
    other, key = services.agent_create(name="agent-b")
    grant(other, "alice")
    return key


async def _respond(key: str, request_id, result=None, **extra) -> wire.Answer:
    body = {"jsonrpc": "2.0", "id": request_id, "result": ANSWER if result is None else result, **extra}
    return await wire.post(key, body)


def _payload(data: dict) -> str:
    return signing.b64_encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def _forgeries(genuine: str, ask: Ask) -> dict:
    value, _, signature = genuine.rpartition(":")
    return {
        "garbage": "not-an-id",
        "a number": 7,
        "tampered signature": f"{value}:{signature[:-2]}{'AA' if not signature.endswith('AA') else 'BB'}",
        # Another ask's id put into the genuine payload, the genuine signature kept.
        "another ask, unsigned": ":".join([_payload({"ask": "q_" + "0" * 32, "agent": ask.agent_id}),
                                           *genuine.split(":")[1:]]),
        # Signed by this server, for this ask and agent, but as something else (a requestState).
        "another salt": signing.dumps({"ask": ask.id, "agent": ask.agent_id}, salt=results.REQUEST_STATE_SALT,
                                      compress=False),
        "too long": genuine + "x" * 500,
    }


async def test_a_forged_or_tampered_response_id_is_refused_and_changes_nothing(agent_and_key, pending_ask):
    key = agent_and_key[1]
    ask = pending_ask
    genuine = await database_sync_to_async(host.request_id)(ask)
    before = await database_sync_to_async(_state)(ask.id)
    for name, forged in _forgeries(genuine, ask).items():
        answer = await _respond(key, forged)
        assert answer.status == 400, (name, answer.exchange.body[:200])
        assert answer.error["code"] == -32600 and "names no request" in answer.error["message"], name
        assert await database_sync_to_async(_state)(ask.id) == before, name
    # The genuine id works: the refusals above were the forgeries'.
    assert (await _respond(key, genuine)).status == 202
    assert (await database_sync_to_async(_state)(ask.id))[:2] == ("answered", "submitted")


async def test_another_agents_key_cannot_use_a_genuine_id(agent_and_key, pending_ask):
    genuine = await database_sync_to_async(host.request_id)(pending_ask)
    other_key = await database_sync_to_async(_other_agents_key)()
    before = await database_sync_to_async(_state)(pending_ask.id)
    for result in (ANSWER, {"action": "decline"}):
        answer = await _respond(other_key, genuine, result)
        assert answer.status == 400 and answer.error["code"] == -32600
    assert await database_sync_to_async(_state)(pending_ask.id) == before


@pytest.mark.parametrize("result", [{"action": "maybe"}, {"content": {"q1": "SQLite"}}, "accept", None, [],
                                    {"action": "accept", "content": {"q1": {"$gt": ""}}}])
async def test_a_result_that_is_no_elicitation_result_is_refused(result, agent_and_key, pending_ask):
    genuine = await database_sync_to_async(host.request_id)(pending_ask)
    before = await database_sync_to_async(_state)(pending_ask.id)
    body = {"jsonrpc": "2.0", "id": genuine, "result": result}
    answer = await wire.post(agent_and_key[1], body)
    assert answer.status == 400 and answer.error["code"] == -32602
    assert await database_sync_to_async(_state)(pending_ask.id) == before


async def test_content_that_does_not_answer_the_form_changes_nothing(agent_and_key, pending_ask):
    genuine = await database_sync_to_async(host.request_id)(pending_ask)
    for content in ({"q1": "MongoDB"}, {"q1": ["PostgreSQL", "SQLite"]}, {"q1_other": "x" * 10_001}, {}):
        answer = await _respond(agent_and_key[1], genuine, {"action": "accept", "content": content})
        assert answer.status == 202  # taken (the client did answer), and ignored
        assert (await database_sync_to_async(_state)(pending_ask.id))[0] == "pending", content


async def test_an_error_response_or_a_late_one_changes_nothing(agent_and_key, pending_ask):
    key = agent_and_key[1]
    genuine = await database_sync_to_async(host.request_id)(pending_ask)
    refused = {"jsonrpc": "2.0", "id": genuine, "error": {"code": -32601, "message": "no forms here"}}
    assert (await wire.post(key, refused)).status == 202
    assert (await database_sync_to_async(_state)(pending_ask.id))[0] == "pending"
    assert (await _respond(key, genuine, {"action": "decline"})).status == 202
    ended = await database_sync_to_async(_state)(pending_ask.id)
    assert ended[:2] == ("cancelled", "declined")
    assert (await _respond(key, genuine)).status == 202  # a second response: the ask has ended
    assert (await database_sync_to_async(_state)(pending_ask.id))[:2] == ended[:2]
