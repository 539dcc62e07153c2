"""Attacks on the MCP App's surface (``askcards.mcp.apps``): the app's tools answer only the
caller's own asks — its agent and the session its URL names — so a person at one agent's host
cannot read or answer another agent's question, nor this agent's in another conversation; and the
handshake era's record of MCP Apps (a signed ``Mcp-Session-Id``) cannot be forged or moved to
another key. A client that does not declare MCP Apps gets no app tool at all
(tests/mcp/test_mcp_app.py)."""
from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from askcards import services
from tests.conftest import QUESTIONS, answer_for, grant
from tests.mcp.test_mcp_app import CAPABILITIES, DECLARES, Client, _ask, _pending, key  # noqa: F401
from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def test_the_app_cannot_see_or_answer_another_agents_or_another_sessions_ask(key, agent, present_session):
    ask_id = await database_sync_to_async(_pending)(agent, present_session)

    def agent_b():
        other, other_key = services.agent_create(name="agent-b")
        grant(other, "alice")
        return other_key

    other_key = await database_sync_to_async(agent_b)()
    # Another agent, even naming the same conversation (its own session of that key).
    theirs = await Client(other_key, wire.LEGACY, DECLARES).connect()
    # The same agent, another session.
    elsewhere = await Client(key, wire.MODERN, DECLARES, query="session=web/other&platform=web&web_user=alice").connect()
    for client in (theirs, elsewhere):
        assert (await client.call("askcards_app_ask", {"questions": QUESTIONS}))["structuredContent"] == {"ask": None}
        refused = await client.call("askcards_app_answer", {"askId": ask_id, "answers": answer_for()})
        assert refused["isError"] is True
        assert refused["content"][0]["text"] == f"no ask {ask_id} of this agent in this session"
    assert (await database_sync_to_async(_ask)(ask_id)).status == "pending"


async def test_a_session_id_askcards_did_not_issue_for_this_key_is_404(key, agent_and_key):
    other_key = (await database_sync_to_async(services.agent_create)(name="agent-c"))[1]
    theirs = await Client(other_key, wire.LEGACY, DECLARES, query="session=c&platform=web").connect()
    for forged in ("not-a-session", theirs.session_id):
        client = Client(key, wire.LEGACY, DECLARES)
        client.session_id = forged
        answer = await client.rpc("tools/list")
        assert answer.status == 404, answer.exchange.body[:300]
        assert "initialize again" in answer.error["message"]
    # 2026-07-28 has no sessions: a header there changes nothing.
    message, headers = wire.request("tools/list", {"_meta": {CAPABILITIES: {}}}, era=wire.MODERN)
    answer = await wire.post(key, message, version=wire.MODERN, extra=[*headers, ("mcp-session-id", "x")])
    assert answer.status == 200 and [t["name"] for t in answer.result["tools"]] == ["ask_user_questions"]
