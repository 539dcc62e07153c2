"""Issue 10 point 8, as the tenancy/abuse issue's point 6 revised it: a person's long answer is
never refused. Free text is accepted up to one bound on every surface (``ANSWER_TEXT_MAX_CHARS``
per value, ``ANSWER_MAX_CHARS`` per submission) and reaches the agent whole; only what a card or
list shows of it is shortened. Over the bound is a clear error with the ask still pending. Names
and ids from outside that exceed their column are clear errors on SQLite and PostgreSQL alike (not
a traceback on PostgreSQL, not stored on SQLite). DingTalk forms: tests/security/test_dingtalk_forms.py."""
from __future__ import annotations

import json
import time

import pytest
from channels.db import database_sync_to_async
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from askcards import services
from askcards.errors import InvalidInput
from askcards.models import Agent, Ask, AskEvent, CallbackReceipt, Respondent
from askcards.surfaces.base import SHORTENED_MARK
from askcards.surfaces.feishu import security
from askcards.surfaces.web import HISTORY_ANSWER_CHARS
from askcards.tools import ANSWER_MAX_CHARS, ANSWER_TEXT_MAX_CHARS
from tests.conftest import QUESTIONS, answer_for, grant_bot, person
from tests.consumers.test_panel import _panel
from tests.dingtalk import integration as dingtalk
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.feishu import FakeFeishu
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN, converge, submit_value
from tests.feishu.integration import click as feishu_click
from tests.security.panel import panel_with_ask

# A long answer as a person writes one: 1,234 characters over 600 lines.
LONG = "\n".join(["这一行稍长些"] * 7 + ["短"] * 593)
assert (len(LONG), LONG.count("\n") + 1) == (1234, 600)

# ------------------------------------------------------------------------------------ the panel


async def _answer(panel, ask_id, answers):
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask_id, "answers": answers})
    while True:
        message = await panel.receive_json_from(timeout=5)
        if message["type"] in ("ask_user_questions_ack", "error"):
            return message


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_long_other_answer_reaches_the_agent_whole_and_its_history_shows_it_shortened(
        settings, recording_surface, agent, web_session):
    panel, ask = await panel_with_ask(settings, agent, web_session)
    ack = await _answer(panel, ask.id, answer_for(labels=(), custom=LONG))
    assert (ack["requestId"], ack["ok"]) == (ask.id, True)
    ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert json.loads(ask.result["tool_result"])["answers"][0]["customInput"] == LONG
    await panel.disconnect()
    # The history (最近回答) is a reminder: the answer there is cut, with the mark.
    again = await _panel(await database_sync_to_async(person)("alice"))
    shown = again.history[0]["answers"][0]["answer"]
    assert len(shown) == HISTORY_ANSWER_CHARS and shown.endswith(SHORTENED_MARK)
    assert LONG.startswith(shown[:-len(SHORTENED_MARK)])
    await again.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_custom_input_over_the_bound_is_an_error_ack_and_the_ask_stays_pending(
        settings, recording_surface, agent, web_session):
    panel, ask = await panel_with_ask(settings, agent, web_session)
    ack = await _answer(panel, ask.id, answer_for(labels=(), custom="长" * (ANSWER_TEXT_MAX_CHARS + 1)))
    assert (ack["requestId"], ack["ok"]) == (ask.id, False)
    assert "longer than 10000 characters" in ack["error"]
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.PENDING

    # At the bound it counts: 30 KB of CJK is well inside one panel message.
    ack = await _answer(panel, ask.id, answer_for(labels=(), custom="长" * ANSWER_TEXT_MAX_CHARS))
    assert ack["ok"] is True
    await panel.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_answers_over_the_bound_together_are_an_error_ack_and_the_ask_stays_pending(
        settings, recording_surface, agent, web_session):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface"]
    panel = await _panel(await database_sync_to_async(person)("alice"))
    questions = [{**QUESTIONS[0], "question": f"问题 {n}", "header": f"问题 {n}"} for n in range(3)]
    ask = (await database_sync_to_async(services.tool_call)(
        agent=agent, session=web_session, name="ask_user_questions", arguments={"questions": questions})).ask
    await panel.receive_json_from(timeout=5)
    each = ANSWER_MAX_CHARS // 3 + 1  # each within its own bound, together over theirs
    answers = [{"question": q["question"], "selectedLabels": [], "customInput": "长" * each} for q in questions]
    ack = await _answer(panel, ask.id, answers)
    assert ack["ok"] is False and "longer than 20000 characters in all" in ack["error"]
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.PENDING
    await panel.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_message_of_900_kb_is_an_error_and_the_ask_stays_pending(settings, recording_surface, agent,
                                                                             web_session):
    panel, ask = await panel_with_ask(settings, agent, web_session)
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id,
                              "answers": answer_for(labels=(), custom="x" * 900_000)})
    error = await panel.receive_json_from(timeout=5)
    assert error["type"] == "error" and "larger than 262144 bytes" in error["error"]
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.PENDING
    await panel.disconnect()


# ------------------------------------------------------------------------------------- Feishu


@pytest.fixture
def feishu_ask(settings, agent, api):
    """A pending ask_user_questions on alice's running Feishu progress card (the fake server's)."""
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.feishu.surface.FeishuSurface"]
    with FakeFeishu() as fake:
        bot = services.bot_add(platform="feishu", app_id=fake.app_id, app_secret=fake.app_secret,
                               base_url=fake.base_url, encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)
        grant_bot(agent, bot)
        session, _ = services.session_upsert(agent=agent, key=f"feishu-{bot.app_id}-private-ou_alice", bot=bot)
        running = api.put(f"/api/v1/sessions/{session.id}/progress", {"status": "running"}, format="json")
        assert running.status_code == 200
        outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                     arguments={"questions": QUESTIONS})
        assert outcome.status == "pending"
        converge()
        yield bot, outcome.ask


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("text", [LONG[:1000], LONG], ids=["the input's 1000", "1234 from any client"])
def test_feishu_other_text_reaches_the_agent_whole(feishu_ask, text):
    # Feishu's input sends at most 1000 characters; the server's bound is every surface's.
    bot, ask = feishu_ask
    response = feishu_click(bot, operator="ou_alice", value=submit_value(ask), form_value={"c0_0": text})
    assert response.json()["toast"]["content"] == "已提交"
    ask.refresh_from_db()
    assert json.loads(ask.result["tool_result"])["answers"][0]["customInput"] == text


@pytest.mark.django_db(transaction=True)
def test_feishu_other_text_over_the_bound_is_refused_and_the_ask_stays_pending(feishu_ask):
    bot, ask = feishu_ask
    response = feishu_click(bot, operator="ou_alice", value=submit_value(ask),
                            form_value={"c0_0": "长" * (ANSWER_TEXT_MAX_CHARS + 1)})
    assert response.status_code == 200 and response.json()["toast"]["content"] == "问题已失效"
    ask.refresh_from_db()
    assert ask.status == Ask.Status.PENDING


# ----------------------------------------------------------------------------------- DingTalk


@pytest.fixture
def fake_dingtalk():
    with FakeDingTalk() as server:
        yield server


@pytest.fixture
def dingtalk_ask(settings, agent, fake_dingtalk):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    bot = dingtalk.make_bot(fake_dingtalk)
    outcome, _ = dingtalk.create(agent, dingtalk.make_session(agent, bot), {"fields": dingtalk.FIELDS})
    assert outcome.ask.status == Ask.Status.PENDING
    return bot, outcome.ask


@pytest.mark.django_db(transaction=True)
def test_dingtalk_user_id_longer_than_its_column_is_400_and_changes_nothing(dingtalk_ask):
    bot, ask = dingtalk_ask
    events = AskEvent.objects.filter(ask=ask).count()
    response = dingtalk.click(bot, ask, "u" * 400, form={"dish": "a"})
    assert response.status_code == 400
    assert "userId is longer than 200 characters" in response.json()["error"]
    assert AskEvent.objects.filter(ask=ask).count() == events


# ------------------------------------------------------------------------------------- Feishu


@pytest.mark.django_db(transaction=True)
def test_feishu_event_id_longer_than_its_column_is_400_and_changes_nothing():
    bot = services.bot_add(platform="feishu", app_id="cli_len", app_secret="s", base_url="http://127.0.0.1:9",
                           encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)
    now = int(time.time())
    plaintext = {"schema": "2.0",
                 "header": {"event_id": "e" * 5000, "token": VERIFICATION_TOKEN, "create_time": str(now * 1_000_000),
                            "event_type": "card.action.trigger"},
                 "event": {"operator": {"open_id": "ou_alice"},
                           "action": {"value": {"kind": "feishu_progress", "act": "cancel", "sessionId": "s_1"}}}}
    body = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(plaintext))}).encode()
    headers = {"X-Lark-Request-Timestamp": str(now), "X-Lark-Request-Nonce": "n-1",
               "X-Lark-Signature": security.signature(str(now), "n-1", ENCRYPT_KEY, body)}
    response = Client().post(f"/callbacks/feishu/{bot.app_id}/", body, content_type="application/json", headers=headers)
    assert response.status_code == 400
    assert "header.event_id is longer than 200 characters" in response.json()["error"]
    assert not CallbackReceipt.objects.exists()


# -------------------------------------------------------------------------------- agent names


def test_agent_name_over_100_characters_is_a_clear_command_error(db):
    with pytest.raises(CommandError, match="agent name is longer than 100 characters"):
        call_command("askcards_agent", "create", "a" * 101)
    assert not Agent.objects.exists()


def test_agent_name_over_100_characters_is_a_clear_service_error(db):
    with pytest.raises(InvalidInput, match="agent name is longer than 100 characters"):
        services.agent_create(name="a" * 101)
    assert not Agent.objects.exists()


def test_agent_name_over_100_characters_is_a_form_error_in_the_admin(admin_client):
    response = admin_client.post(reverse("admin:askcards_agent_add"), {"name": "a" * 101, "webhook_url": ""})
    assert response.status_code == 200
    assert "at most 100 characters" in response.content.decode()
    assert not Agent.objects.exists()


def test_agent_name_of_100_characters_is_accepted(db):
    agent, _ = services.agent_create(name="a" * 100)
    assert Agent.objects.get(pk=agent.pk).name == "a" * 100


# ----------------------------------------------------------------------- ids from tool arguments


@pytest.mark.django_db(transaction=True)
def test_dingtalk_respondent_id_longer_than_its_column_once_case_folded_is_a_tool_error(settings, agent, fake_dingtalk):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    session = dingtalk.make_session(agent, dingtalk.make_bot(fake_dingtalk), key="dingtalk/group/cid", chat_type="group",
                                    chat_id="cid")
    target = {"type": "group", "id": "cid", "respondentUserIds": ["ß" * 200]}  # 400 characters once case-folded
    outcome, details = dingtalk.create(agent, session, {"fields": dingtalk.FIELDS, "target": target})
    assert outcome.status == "failed"
    assert details["status"] == "failed" and details["error"]
    assert not Respondent.objects.exists()
