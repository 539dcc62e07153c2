"""Issue 10 point 2: every JSON parse of outside input is size- and depth-bounded and answers 400
(a clear error, nothing changed, no traceback) — never RecursionError's 500."""
from __future__ import annotations

import json
import logging
import time

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from askcards.http import jsonlimits
from askcards import services
from askcards.models import Ask, AskEvent, Session
from askcards.surfaces.dingtalk import callbacks as dingtalk_callbacks
from askcards.surfaces.feishu import security
from tests.fakes.dingtalk import callback_signature
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN

DEEP = "[" * 20_000 + "]" * 20_000  # far past json.loads' recursion limit


@pytest.fixture
def no_tracebacks(caplog):
    """Fails the test when anything was logged with a traceback (a 500 on the way)."""
    caplog.set_level(logging.WARNING)
    yield caplog
    assert not [record for record in caplog.records if record.exc_info], "a traceback was logged"


# ---------------------------------------------------------------------------- the loader itself


@pytest.mark.parametrize("text", [DEEP, '{"a":' * 65 + "1" + "}" * 65, "[" * 1_000_000])
def test_loader_refuses_nesting_deeper_than_64_without_recursing(text):
    with pytest.raises(jsonlimits.JSONRefused, match="nested deeper than 64 levels"):
        jsonlimits.load(text, what="body", max_bytes=10**7)


def test_loader_reads_64_levels_and_brackets_inside_strings():
    assert jsonlimits.load("[" * 64 + "]" * 64, what="body") is not None
    assert jsonlimits.load(json.dumps({"text": "[" * 10_000}), what="body") == {"text": "[" * 10_000}


def test_loader_scans_escaped_quotes_in_linear_time():
    started = time.monotonic()
    with pytest.raises(jsonlimits.JSONRefused, match="not valid JSON"):
        jsonlimits.load('"' + '\\"' * 400_000, what="body")
    assert time.monotonic() - started < 2


def test_loader_refuses_more_bytes_than_its_limit():
    with pytest.raises(jsonlimits.JSONRefused, match="larger than 100 bytes"):
        jsonlimits.load("[" + "1," * 60 + "1]", what="body", max_bytes=100)


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity]", "[1e999]"])
def test_loader_refuses_what_is_not_a_json_number(text):
    with pytest.raises(jsonlimits.JSONRefused, match="not valid JSON"):
        jsonlimits.load(text, what="body")


# ------------------------------------------------------------------------------------- Feishu


@pytest.fixture
def feishu_bot(db):
    return services.bot_add(platform="feishu", app_id="cli_limits", app_secret="s", base_url="http://127.0.0.1:9",
                            encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)


def _feishu_post(bot, body: bytes, *, sign: bool = True):
    now = str(int(time.time()))
    headers = {}
    if sign:
        headers = {"X-Lark-Request-Timestamp": now, "X-Lark-Request-Nonce": "n-1",
                   "X-Lark-Signature": security.signature(now, "n-1", ENCRYPT_KEY, body)}
    return Client().post(f"/callbacks/feishu/{bot.app_id}/", body, content_type="application/json", headers=headers)


@pytest.mark.django_db(transaction=True)
def test_feishu_callback_of_20000_brackets_is_400(feishu_bot, no_tracebacks):
    response = _feishu_post(feishu_bot, DEEP.encode(), sign=False)
    assert response.status_code == 400
    assert "nested deeper than 64 levels" in response.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_feishu_signed_body_decrypting_to_deep_nesting_is_400(feishu_bot, no_tracebacks):
    body = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, '{"a":' + DEEP + "}")}).encode()
    response = _feishu_post(feishu_bot, body)
    assert response.status_code == 400
    assert "decrypted callback is nested deeper than 64 levels" in response.json()["error"]
    assert not AskEvent.objects.exists()


# ----------------------------------------------------------------------------------- DingTalk


@pytest.fixture
def dingtalk_bot(db):
    return services.bot_add(platform="dingtalk", app_id="ding_limits", app_secret="s", base_url="http://127.0.0.1:9",
                            api_secret="api-secret")


@pytest.mark.django_db(transaction=True)
def test_dingtalk_callback_whose_content_nests_deep_is_400(dingtalk_bot, no_tracebacks):
    timestamp = str(int(time.time() * 1000))
    body = json.dumps({"outTrackId": "t-1", "userId": "u", "content": DEEP}).encode()
    response = Client().post(
        f"/callbacks/dingtalk/{dingtalk_bot.app_id}/", body, content_type="application/json",
        headers={"x-ddpaas-signature-timestamp": timestamp,
                 "x-ddpaas-signature": callback_signature(timestamp, "api-secret")},
    )
    assert response.status_code == 400
    assert "content is nested deeper than 64 levels" in response.json()["error"]


def test_dingtalk_stream_data_nesting_deep_is_a_clear_malformed_callback():
    with pytest.raises(dingtalk_callbacks.MalformedCallback, match="nested deeper than 64 levels"):
        dingtalk_callbacks.parse_callback(DEEP)


class _Socket:
    """The Stream connection: hands out frames, records what the client sends back."""

    def __init__(self, frames):
        self.frames, self.sent = list(frames), []

    async def recv(self):
        if not self.frames:
            raise EOFError
        return self.frames.pop(0)

    async def send(self, text):
        self.sent.append(json.loads(text))


@pytest.mark.asyncio
async def test_dingtalk_stream_frame_nesting_deep_is_skipped_and_the_next_frame_answered(caplog):
    from askcards.surfaces.dingtalk.stream import StreamClient

    client = StreamClient(client_id="ding_limits", client_secret="s", base_url="http://127.0.0.1:9",
                          handler=None, watchdog_seconds=5)
    ping = json.dumps({"type": "SYSTEM", "headers": {"topic": "ping", "messageId": "m-2"}, "data": "{}"})
    socket = _Socket([DEEP, ping])
    with caplog.at_level(logging.WARNING), pytest.raises(EOFError):
        await client._serve(socket)
    assert [ack["headers"]["messageId"] for ack in socket.sent] == ["m-2"]
    assert "nested deeper than 64 levels" in caplog.text
    assert not [record for record in caplog.records if record.exc_info]


# ------------------------------------------------------------------------------------ the API


@pytest.mark.parametrize("route", ["/api/v1/sessions", "/api/v1/tools/call"])
def test_api_body_of_20000_brackets_is_400_in_the_api_error_shape(api, route, no_tracebacks):
    before = Session.objects.count()
    response = api.post(route, ('{"key": ' + DEEP + "}").encode(), content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "malformed_json"
    assert "nested deeper than 64 levels" in error["message"]
    assert Session.objects.count() == before


# --------------------------------------------------------------------------------- the panel


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_panel_message_of_20000_brackets_gets_an_error_and_the_socket_answers_after(
        settings, recording_surface, agent, web_session, no_tracebacks):
    from tests.conftest import answer_for
    from tests.security.panel import panel_with_ask

    panel, ask = await panel_with_ask(settings, agent, web_session)
    await panel.send_to(text_data=DEEP)
    error = await panel.receive_json_from(timeout=5)
    assert error["type"] == "error" and "nested deeper than 64 levels" in error["error"]
    await panel.send_json_to({"type": "ask_user_questions_result", "requestId": ask.id, "answers": answer_for()})
    assert (await panel.receive_json_from(timeout=5))["ok"] is True
    assert (await database_sync_to_async(Ask.objects.get)(pk=ask.id)).status == Ask.Status.ANSWERED
    await panel.disconnect()
