"""Issue 10 point 8: every free-text answer has a server-side length limit and an over-long one is a
clear error with the ask still pending; names and ids from outside that exceed their column are
clear errors on SQLite and PostgreSQL alike (not a traceback on PostgreSQL, not stored on SQLite)."""
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
from askcards.surfaces.feishu import security
from askcards.tools.ask_user_questions import CUSTOM_MAX_CHARS
from tests.conftest import QUESTIONS, answer_for
from tests.dingtalk import integration as dingtalk
from tests.fakes.dingtalk import FakeDingTalk
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN
from tests.security.panel import panel_with_ask

# ------------------------------------------------------------------------------------ the panel


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_custom_input_over_1000_characters_is_an_error_ack_and_the_ask_stays_pending(
        settings, recording_surface, agent, web_session):
    panel, ask = await panel_with_ask(settings, agent, web_session)
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id,
                              "answers": answer_for(labels=(), custom="长" * (CUSTOM_MAX_CHARS + 1))})
    ack = await panel.receive_json_from(timeout=5)
    assert (ack["requestId"], ack["ok"]) == (ask.id, False)
    assert "longer than 1000 characters" in ack["error"]
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.PENDING

    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id,
                              "answers": answer_for(labels=(), custom="长" * CUSTOM_MAX_CHARS)})
    assert (await panel.receive_json_from(timeout=5))["ok"] is True
    await panel.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_message_of_900_kb_is_an_error_and_the_ask_stays_pending(settings, recording_surface, agent,
                                                                             web_session):
    panel, ask = await panel_with_ask(settings, agent, web_session)
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id,
                              "answers": answer_for(labels=(), custom="x" * 900_000)})
    error = await panel.receive_json_from(timeout=5)
    assert error["type"] == "error" and "larger than 65536 bytes" in error["error"]
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.PENDING
    await panel.disconnect()


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
def test_dingtalk_text_answer_over_1000_characters_is_400_and_the_ask_stays_pending(dingtalk_ask):
    bot, ask = dingtalk_ask
    response = dingtalk.click(bot, ask, "staff_a", form={"dish": "a", "note": "长" * 1001})
    assert response.status_code == 400
    assert "longer than 1000 characters" in response.json()["error"]
    ask.refresh_from_db()
    assert ask.status == Ask.Status.PENDING
    assert not Respondent.objects.filter(ask=ask).exclude(status=Respondent.Status.PENDING).exists()


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
