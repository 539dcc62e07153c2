"""Issue 10 point 7: text no database can hold (U+0000, a lone surrogate; object keys too) is
refused with a clear error at every entry, the same on SQLite and PostgreSQL, and nothing changes."""
from __future__ import annotations

import json
import time

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from askcards import services
from askcards.models import Ask, AskEvent, Respondent
from askcards.surfaces.dingtalk import callbacks as dingtalk_callbacks
from askcards.surfaces.feishu import security
from tests.conftest import QUESTIONS, answer_for, grant_bot
from tests.dingtalk import integration as dingtalk
from tests.fakes.dingtalk import FakeDingTalk
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN
from tests.security.panel import panel_with_ask

UNSTORABLE = {"nul": "a\u0000b", "surrogate": "a\ud800b"}


# ------------------------------------------------------------------------------------ the panel


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=UNSTORABLE.keys())
async def test_panel_answer_with_unstorable_text_gets_an_error_ack_and_the_socket_answers_after(
        settings, recording_surface, agent, web_session, text):
    panel, ask = await panel_with_ask(settings, agent, web_session)
    # json.dumps escapes both as \u0000 / \ud800, as a browser's JSON.stringify does.
    await panel.send_to(text_data=json.dumps({"type": "ask_user_questions_result", "requestId": ask.id,
                                              "answers": answer_for(labels=(), custom=text)}))
    ack = await panel.receive_json_from(timeout=5)
    assert (ack["requestId"], ack["ok"]) == (ask.id, False)
    assert "NUL" in ack["error"] or "surrogate" in ack["error"]
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.PENDING

    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id, "answers": answer_for()})
    assert (await panel.receive_json_from(timeout=5))["ok"] is True
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.ANSWERED
    await panel.disconnect()


# ------------------------------------------------------------------------------------- Feishu


def _feishu_click(bot, ask, form_value: dict):
    """A signed, encrypted submit whose JSON escapes the text (\\u0000, \\ud800) as Feishu's would."""
    now = int(time.time())
    plaintext = {
        "schema": "2.0",
        "header": {"event_id": f"ev-{time.monotonic_ns()}", "token": VERIFICATION_TOKEN,
                   "create_time": str(now * 1_000_000), "event_type": "card.action.trigger"},
        "event": {
            "operator": {"open_id": ask.sender_id},
            "action": {"tag": "button", "name": "submit_0", "form_value": form_value,
                       "value": {"kind": "feishu_ask", "act": "submit", "sessionId": ask.session_id,
                                 "requestId": ask.id, "sender": ask.sender_id}},
            "context": {"open_message_id": "om_1", "open_chat_id": "oc_1"},
        },
    }
    body = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(plaintext))}).encode()
    headers = {"X-Lark-Request-Timestamp": str(now), "X-Lark-Request-Nonce": "n-1",
               "X-Lark-Signature": security.signature(str(now), "n-1", ENCRYPT_KEY, body)}
    return Client().post(f"/callbacks/feishu/{bot.app_id}/", body, content_type="application/json", headers=headers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_feishu_form_value_with_unstorable_text_is_400_and_the_ask_stays_pending(recording_surface, agent, text):
    bot = services.bot_add(platform="feishu", app_id="cli_text", app_secret="s", base_url="http://127.0.0.1:9",
                           encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)
    grant_bot(agent, bot)
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_text-private-ou_alice", platform="feishu",
                                         bot=bot, user_id="ou_alice")
    recording_surface.present.add(session.id)
    ask = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                             arguments={"questions": QUESTIONS}).ask
    assert ask.status == Ask.Status.PENDING
    events = AskEvent.objects.filter(ask=ask).count()
    response = _feishu_click(bot, ask, {"q0_0": "", "c0_0": text})
    assert response.status_code == 400
    assert "NUL" in response.json()["error"] or "surrogate" in response.json()["error"]
    ask.refresh_from_db()
    assert ask.status == Ask.Status.PENDING
    assert AskEvent.objects.filter(ask=ask).count() == events


# ----------------------------------------------------------------------------------- DingTalk


@pytest.fixture
def fake_dingtalk():
    with FakeDingTalk() as server:
        yield server


@pytest.mark.django_db(transaction=True)
def test_dingtalk_tool_call_whose_field_default_has_a_nul_key_is_400(settings, agent, api, fake_dingtalk):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    session = dingtalk.make_session(agent, dingtalk.make_bot(fake_dingtalk))
    fields = [{"name": "note", "label": "备注", "type": "TEXT", "default": {"\u0000": "x"}}]
    body = {"session": session.id, "name": dingtalk.TOOL, "arguments": {"fields": fields}}
    response = api.post("/api/v1/tools/call", json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "malformed_json"
    assert "body.arguments.fields[0].default (a key) contains a NUL character" in error["message"]
    assert not Ask.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_dingtalk_callback_with_unstorable_text_is_400_and_the_ask_stays_pending(settings, agent, fake_dingtalk, text):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    bot = dingtalk.make_bot(fake_dingtalk)
    session = dingtalk.make_session(agent, bot)
    outcome, _ = dingtalk.create(agent, session, {"fields": dingtalk.FIELDS})
    ask = outcome.ask
    response = dingtalk.click(bot, ask, "staff_a", form={"dish": "a", "note": text})
    assert response.status_code == 400
    assert "NUL" in response.json()["error"] or "surrogate" in response.json()["error"]
    ask.refresh_from_db()
    assert ask.status == Ask.Status.PENDING
    assert not Respondent.objects.filter(ask=ask).exclude(status=Respondent.Status.PENDING).exists()


@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_dingtalk_stream_callback_object_with_unstorable_key_is_malformed(text):
    # Stream SDKs hand over decoded objects: the same rule applies to them, keys included.
    payload = {"outTrackId": "t-1", "userId": "u",
               "cardPrivateData": {"actionIds": [], "params": {"form": {text: "x"}}}}
    with pytest.raises(dingtalk_callbacks.MalformedCallback, match=r"\(a key\) contains"):
        dingtalk_callbacks.parse_callback(payload)


# ------------------------------------------------------------------------------------ the API


@pytest.mark.parametrize("text", UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_api_tool_call_with_unstorable_text_in_arguments_is_400(api, present_session, text):
    questions = json.loads(json.dumps(QUESTIONS))
    questions[0]["question"] = f"Which {text} one?"
    body = {"session": present_session.id, "name": "ask_user_questions", "arguments": {"questions": questions}}
    response = api.post("/api/v1/tools/call", json.dumps(body), content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "malformed_json"
    assert "body.arguments.questions[0].question contains" in error["message"]
    assert not Ask.objects.exists()
