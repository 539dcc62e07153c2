"""Tenancy: an agent touches only its own asks and uses only the bots an operator granted it.

- Two agents whose sessions share a bot, a DingTalk conversation and a person: each one's newer
  question and inbound message supersede only that agent's own older cards, whether the agents
  come through the REST API or MCP (the supersede scope names the bot, the session key and the
  person, never the agent, so it is filtered by agent).
- A bot is granted to agents (``askcards_agent grant NAME --bot APP_ID``, admin): an ungranted or
  unknown bot is 403 ``bot_not_granted`` naming the grant command, with nothing written, on
  ``POST /api/v1/sessions`` and in an MCP URL. Revoking closes nothing already sent (the card stays
  answerable, a retried ``call_id`` returns its ask) but refuses new asks — and every other new
  message through the bot: a new Feishu progress card (``PUT …/progress``, an agent host's hook)
  is 403 ``bot_not_granted`` with nothing written, and a card queued before the revoke but never
  sent is not sent (its asks fail ``delivery_failed``), while the card already sent is still updated.
"""
from __future__ import annotations

import asyncio
import io
import json
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from askcards import services
from askcards.models import Agent, Ask, CardMessage, ProgressCard, Session
from tests.api.conftest import db_state, error_of, send
from tests.dingtalk.integration import QUESTIONS, TOOL, click, make_bot
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.feishu import FakeFeishu
from tests.feishu.integration import converge
from tests.hosts.test_claude_code_hook import BASH
from tests.hosts.test_claude_code_hook import _post as hook_post
from tests.security import mcp_wire as wire

pytestmark = pytest.mark.django_db(transaction=True)

PERSON = "staff_a"
CONVERSATION = {"key": "dingtalk/dm/staff_a", "platform": "dingtalk", "chat_type": "p2p", "user_id": PERSON}


@pytest.fixture
def world(settings):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    with FakeDingTalk() as fake:
        bot = make_bot(fake)
        agents = {}
        for name in ("agent-one", "agent-two"):
            agent, key = services.agent_create(name=name, bots=[bot])
            agents[name] = (agent, key)
        yield {"bot": bot, "fake": fake, "agents": agents}


def rest(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def ask_over_rest(world, name: str) -> str:
    """``name``'s agent opens the shared conversation and sends a card; the new ask's id."""
    client = rest(world["agents"][name][1])
    session = send(client, "POST", "/api/v1/sessions", {**CONVERSATION, "bot": world["bot"].app_id})
    assert session.status_code in (200, 201), session.content
    body = {"session": CONVERSATION["key"], "name": TOOL, "arguments": {"questions": QUESTIONS}}
    response = send(client, "POST", "/api/v1/tools/call", body)
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "pending", response.json()
    return response.json()["ask"]["id"]


def mcp_query(world) -> str:
    fields = {"session" if name == "key" else name: value for name, value in CONVERSATION.items()}
    return urlencode({**fields, "bot": world["bot"].app_id})


def ask_over_mcp(world, name: str) -> str:
    answer = asyncio.run(wire.rpc(
        world["agents"][name][1], "tools/call", {"name": TOOL, "arguments": {"questions": QUESTIONS}},
        query=mcp_query(world),
    ))
    assert answer.status == 200 and answer.error is None, answer.final
    assert answer.result["isError"] is False, answer.result
    return answer.result["structuredContent"]["ask"]["id"]


ASK = {"rest": ask_over_rest, "mcp": ask_over_mcp}


def status_of(ask_id: str) -> tuple[str, str]:
    ask = Ask.objects.get(pk=ask_id)
    return ask.status, ask.reason


@pytest.mark.parametrize("first, second", [("rest", "mcp"), ("mcp", "rest"), ("rest", "rest"), ("mcp", "mcp")])
def test_another_agents_question_in_the_same_conversation_leaves_the_card_alone(world, first, second):
    mine = ASK[first](world, "agent-one")
    theirs = ASK[second](world, "agent-two")
    assert status_of(mine) == ("pending", "") and status_of(theirs) == ("pending", "")

    # Each agent's own newer question still replaces its own older card, and only that one.
    my_newer = ASK[second](world, "agent-one")
    assert status_of(mine) == ("invalidated", "superseded_by_question")
    assert status_of(theirs) == ("pending", "")
    assert status_of(my_newer) == ("pending", "")


@pytest.mark.parametrize("via", ["rest", "mcp"])
def test_an_inbound_message_reported_by_one_agent_ends_only_its_own_cards(world, via):
    mine = ASK[via](world, "agent-one")
    theirs = ASK[via](world, "agent-two")
    client = rest(world["agents"]["agent-two"][1])
    session = Session.objects.get(agent=world["agents"]["agent-two"][0], key=CONVERSATION["key"])
    response = send(client, "POST", f"/api/v1/sessions/{session.id}/messages", {"sender_id": PERSON})
    assert response.json() == {"invalidated": 1}
    assert status_of(theirs) == ("invalidated", "superseded_by_message")
    assert status_of(mine) == ("pending", "")
    # The card agent-two's message did not end is still the person's to answer.
    click(world["bot"], Ask.objects.get(pk=mine), PERSON, form={"answer_0": "测试"})
    assert status_of(mine) == ("answered", "submitted")


# ---------------------------------------------------------------------------------- bot grants


@pytest.fixture
def outsider(world):
    """An agent nobody granted the bot."""
    agent, key = services.agent_create(name="outsider")
    return agent, key


def grant_command(name: str, app_id: str) -> str:
    return f"python manage.py askcards_agent grant {name} --bot {app_id}"


@pytest.mark.parametrize("app_id", ["granted-elsewhere", "cli_no_such_app"])
def test_an_ungranted_or_unknown_bot_is_403_naming_the_grant_and_writes_nothing(world, outsider, app_id):
    app_id = world["bot"].app_id if app_id == "granted-elsewhere" else app_id
    before = db_state()
    response = send(rest(outsider[1]), "POST", "/api/v1/sessions", {**CONVERSATION, "bot": app_id})
    code, message = error_of(response, 403)
    assert code == "bot_not_granted"
    assert grant_command("outsider", app_id) in message
    assert db_state() == before

    query = urlencode({"session": CONVERSATION["key"], "platform": "dingtalk", "user_id": PERSON, "bot": app_id})
    for method, params in (("tools/list", {}), ("tools/call", {"name": TOOL, "arguments": {"questions": QUESTIONS}})):
        answer = asyncio.run(wire.rpc(outsider[1], method, params, query=query))
        assert answer.error is not None and grant_command("outsider", app_id) in answer.error["message"], answer.final
    assert db_state() == before
    assert not Session.objects.filter(agent=outsider[0]).exists()


def test_the_grant_command_lets_the_agent_use_the_bot(world, outsider):
    out = io.StringIO()
    call_command("askcards_agent", "grant", "outsider", "--bot", world["bot"].app_id, stdout=out)
    assert f"may now use dingtalk bot {world['bot'].app_id!r}" in out.getvalue()
    world["agents"]["outsider"] = outsider
    assert Ask.objects.get(pk=ask_over_rest(world, "outsider")).status == "pending"
    listing = io.StringIO()
    call_command("askcards_agent", "list", stdout=listing)
    line = next(line for line in listing.getvalue().splitlines() if line.startswith("outsider\t"))
    assert line.endswith(f"\tdingtalk:{world['bot'].app_id}")


def test_revoking_keeps_what_was_sent_and_refuses_new_asks(world):
    agent, key = world["agents"]["agent-one"]
    client = rest(key)
    send(client, "POST", "/api/v1/sessions", {**CONVERSATION, "bot": world["bot"].app_id})
    body = {"session": CONVERSATION["key"], "name": TOOL, "arguments": {"questions": QUESTIONS}, "call_id": "c-1"}
    sent = send(client, "POST", "/api/v1/tools/call", body).json()["ask"]["id"]

    out = io.StringIO()
    call_command("askcards_agent", "revoke", "agent-one", "--bot", world["bot"].app_id, stdout=out)
    assert "its cards already sent stay answerable" in out.getvalue()

    before = db_state()
    refused = send(client, "POST", "/api/v1/tools/call", {**body, "call_id": "c-2"})
    code, message = error_of(refused, 403)
    assert code == "bot_not_granted" and grant_command("agent-one", world["bot"].app_id) in message
    answer = asyncio.run(wire.rpc(key, "tools/call", {"name": TOOL, "arguments": {"questions": QUESTIONS}},
                                  query=mcp_query(world)))
    assert answer.error is not None, answer.final
    assert grant_command("agent-one", world["bot"].app_id) in answer.error["message"]
    assert db_state() == before

    # The retry of the earlier call returns its ask; the card sent before is still answerable.
    retried = send(client, "POST", "/api/v1/tools/call", body)
    assert retried.status_code == 200 and retried.json()["ask"]["id"] == sent
    assert status_of(sent) == ("pending", "")
    click(world["bot"], Ask.objects.get(pk=sent), PERSON, form={"answer_0": "生产"})
    assert status_of(sent) == ("answered", "submitted")


def test_the_admin_grants_and_revokes_bots_through_the_same_rule(world, admin_client):
    agent = world["agents"]["agent-two"][0]
    page = admin_client.post(
        f"/admin/askcards/agent/{agent.pk}/change/",
        {"name": agent.name, "webhook_url": "", "is_active": "on", "web_users": [], "bots": []},
        follow=True,
    )
    assert page.status_code == 200
    assert f"may no longer use: {world['bot']}" in page.content.decode()
    assert not Agent.objects.get(pk=agent.pk).bots.exists()
    page = admin_client.post(
        f"/admin/askcards/agent/{agent.pk}/change/",
        {"name": agent.name, "webhook_url": "", "is_active": "on", "web_users": [], "bots": [world["bot"].pk]},
        follow=True,
    )
    assert f"may now use: {world['bot']}" in page.content.decode()
    assert list(Agent.objects.get(pk=agent.pk).bots.all()) == [world["bot"]]


def test_an_unknown_tool_names_the_sessions_own_tools(world):
    client = rest(world["agents"]["agent-one"][1])
    send(client, "POST", "/api/v1/sessions", {**CONVERSATION, "bot": world["bot"].app_id})
    response = send(client, "POST", "/api/v1/tools/call",
                    {"session": CONVERSATION["key"], "name": "no_such_tool", "arguments": {}})
    code, message = error_of(response, 400)
    assert code == "unknown_tool"
    assert "this session's tools are: dingtalk_ask_user_question" in message
    assert "ask_user_questions" not in message  # a DingTalk session has no Feishu/web tool


# ------------------------------------------------------------------ Feishu cards after a revoke

FEISHU_QUESTIONS = [{"question": "Ship it?", "header": "Ship", "options": [{"label": "Yes"}, {"label": "No"}]}]


@pytest.fixture
def feishu(settings):
    """agent-one, granted a Feishu bot on the fake Feishu server, with a private chat on it."""
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.feishu.surface.FeishuSurface"]
    with FakeFeishu() as fake:
        bot = services.bot_add(platform="feishu", app_id=fake.app_id, app_secret=fake.app_secret,
                               base_url=fake.base_url)
        agent, key = services.agent_create(name="agent-one", bots=[bot])
        client = rest(key)
        chat = f"feishu-{bot.app_id}-private-ou_alice"
        response = send(client, "POST", "/api/v1/sessions", {"key": chat, "bot": bot.app_id})
        assert response.status_code == 201, response.content
        yield {"fake": fake, "bot": bot, "agent": agent, "key": key, "client": client,
               "session": Session.objects.get(agent=agent, key=chat)}


def progress(world, status: str, **body):
    return send(world["client"], "PUT", f"/api/v1/sessions/{world['session'].id}/progress", {"status": status, **body})


def sent_cards(fake) -> int:
    return len(fake.calls("POST", "/open-apis/im/v1/messages"))


def revoke(world) -> None:
    call_command("askcards_agent", "revoke", world["agent"].name, "--bot", world["bot"].app_id, stdout=io.StringIO())


def test_a_revoked_bot_sends_no_new_progress_card_but_still_updates_the_one_sent(feishu):
    assert progress(feishu, "running", title="Deploy").status_code == 200
    converge()
    assert sent_cards(feishu["fake"]) == 1
    revoke(feishu)

    # The card already sent: its reports (and an agent's restart) still update it, to the end of its run.
    assert progress(feishu, "running", content="step 2").status_code == 200
    assert send(feishu["client"], "POST", f"/api/v1/sessions/{feishu['session'].id}/recover").status_code == 200
    assert ProgressCard.objects.get(session=feishu["session"]).status == "recovering"
    assert progress(feishu, "completed", content="done").status_code == 200
    converge()
    (message,) = feishu["fake"].messages.values()
    assert "done" in json.dumps(message.card, ensure_ascii=False)

    # A new run would be a new card, a new message to alice through the bot: refused, nothing written.
    before = db_state(), list(ProgressCard.objects.values_list("id", "status")), CardMessage.objects.count()
    for body in ({}, {"reply_to": message.message_id}):
        code, text = error_of(progress(feishu, "running", title="Again", **body), 403)
        assert code == "bot_not_granted" and grant_command("agent-one", feishu["bot"].app_id) in text
    assert (db_state(), list(ProgressCard.objects.values_list("id", "status")), CardMessage.objects.count()) == before
    converge()
    assert sent_cards(feishu["fake"]) == 1


def test_an_agent_hosts_hook_starts_no_card_through_a_revoked_bot(feishu):
    """The hook URL names the session only (no ``bot=``, which would be checked first): a tool event
    or a prompt would start a card of its own on the session's bot."""
    revoke(feishu)
    before = db_state(), ProgressCard.objects.count(), CardMessage.objects.count()
    url = f"/hooks/claude-code?session={feishu['session'].key}"
    for event in ({**BASH, "hook_event_name": "PreToolUse"}, BASH):  # a tool event, a permission prompt
        response = asyncio.run(hook_post(url, feishu["key"], event).get_response(timeout=10))
        assert response["status"] == 403, response["body"]
        assert json.loads(response["body"])["error"]["code"] == "bot_not_granted"
    assert (db_state(), ProgressCard.objects.count(), CardMessage.objects.count()) == before
    converge()
    assert sent_cards(feishu["fake"]) == 0


def test_a_card_queued_before_the_revoke_is_never_sent_and_its_asks_fail(feishu):
    assert progress(feishu, "running", title="Deploy").status_code == 200  # queued; the worker has not run
    body = {"session": feishu["session"].id, "name": "ask_user_questions", "arguments": {"questions": FEISHU_QUESTIONS}}
    asked = send(feishu["client"], "POST", "/api/v1/tools/call", body).json()
    assert asked["status"] == "pending", asked
    revoke(feishu)
    converge()
    assert sent_cards(feishu["fake"]) == 0
    assert status_of(asked["ask"]["id"]) == ("failed", "delivery_failed")
    message = CardMessage.objects.get(progress_card__session=feishu["session"])
    assert message.message_id == "" and "no longer granted" in message.last_error
