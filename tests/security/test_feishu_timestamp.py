"""Issue 10 point 11 (part): a signed Feishu timestamp of ``nan`` (or ``inf``) is refused.

``float("nan")`` compares false with everything, so it passed both window checks of check_fresh:
a signature over the timestamp "nan" never went stale — a replayable callback.
"""
from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from askcards import services
from askcards.models import AskEvent, CallbackReceipt
from askcards.surfaces.feishu import security
from askcards.surfaces.feishu.security import CallbackRejected

ENCRYPT_KEY = "ek-123"
TOKEN = "vt-abc"
NOW = 1_760_000_000.0
NOT_A_TIME = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400"]


def _event(create_time: str) -> dict:
    return {"schema": "2.0",
            "header": {"event_id": "ev1", "token": TOKEN, "create_time": create_time, "event_type": "card.action.trigger"},
            "event": {"operator": {"open_id": "ou_1"}, "action": {"value": {"kind": "feishu_ask"}}}}


def _signed(payload: dict, timestamp: str) -> tuple[dict, bytes]:
    raw = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(payload))}).encode()
    headers = {"X-Lark-Request-Timestamp": timestamp, "X-Lark-Request-Nonce": "n1",
               "X-Lark-Signature": security.signature(timestamp, "n1", ENCRYPT_KEY, raw)}
    return headers, raw


@pytest.mark.parametrize("timestamp", NOT_A_TIME)
def test_signed_timestamp_that_is_not_a_time_is_refused(timestamp):
    headers, raw = _signed(_event(str(int(NOW * 1_000_000))), timestamp)
    with pytest.raises(CallbackRejected, match="unix seconds"):
        security.open_callback(headers, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


@pytest.mark.parametrize("create_time", ["nan", "inf", "-1", " 1", "1e6", "9" * 400])
def test_unsigned_create_time_that_is_not_a_microsecond_timestamp_is_refused(create_time):
    raw = json.dumps(_event(create_time)).encode()
    with pytest.raises(CallbackRejected, match="create_time must be a microsecond timestamp"):
        security.open_callback({}, raw, encrypt_key="", verification_token=TOKEN, now=NOW)


@pytest.mark.django_db(transaction=True)
def test_callback_signed_over_nan_is_401_and_changes_nothing():
    bot = services.bot_add(platform="feishu", app_id="cli_nan", app_secret="s", base_url="http://127.0.0.1:9",
                           encrypt_key=ENCRYPT_KEY, verification_token=TOKEN)
    headers, raw = _signed(_event(str(int(time.time() * 1_000_000))), "nan")
    response = Client().post(f"/callbacks/feishu/{bot.app_id}/", raw, content_type="application/json", headers=headers)
    assert response.status_code == 401
    assert "unix seconds" in response.json()["error"]
    assert not CallbackReceipt.objects.exists() and not AskEvent.objects.exists()
