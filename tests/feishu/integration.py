"""Helpers for the Feishu integration tests: a bot on the fake server, signed and encrypted
clicks on the callback view, and the worker's card sync run until the cards converge."""
from __future__ import annotations

import itertools
import json
import time
from typing import Any

from django.test import Client
from django.utils import timezone

from askcards.models import Bot, CardMessage, ProgressCard
from askcards.surfaces.base import SyncReport
from askcards.surfaces.feishu import security
from askcards.surfaces.feishu.surface import FeishuSurface
from askcards.worker import settle

ENCRYPT_KEY = "test-encrypt-key"
VERIFICATION_TOKEN = "test-verification-token"
_events = itertools.count(1)


def signed_callback(
    app_id: str,
    *,
    operator: str,
    value: dict[str, Any],
    form_value: dict[str, Any] | None = None,
    name: str = "submit_0",
    message_id: str = "",
    event_id: str | None = None,
    timestamp: int | None = None,
    encrypt_key: str = ENCRYPT_KEY,
    token: str = VERIFICATION_TOKEN,
    tamper: bool = False,
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one ``card.action.trigger`` callback as Feishu sends it
    (encrypted with the bot's encrypt key, signed over the raw body)."""
    now = int(time.time()) if timestamp is None else timestamp
    plaintext = {
        "schema": "2.0",
        "header": {
            "event_id": event_id or f"ev-{next(_events)}-{time.monotonic_ns()}",
            "token": token,
            "create_time": str(now * 1_000_000),
            "event_type": "card.action.trigger",
            "tenant_key": "tk",
            "app_id": app_id,
        },
        "event": {
            "operator": {"tenant_key": "tk", "open_id": operator},
            "token": "c-1",
            "action": {"value": value, "tag": "button", "name": name, "form_value": form_value or {}},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": "oc_1"},
        },
    }
    body = json.dumps({"encrypt": security.encrypt(encrypt_key, json.dumps(plaintext, ensure_ascii=False))}).encode()
    nonce = f"nonce-{time.monotonic_ns()}"
    signature = security.signature(str(now), nonce, encrypt_key, body)
    if tamper:
        body = body.replace(b'"encrypt": "', b'"encrypt": "A')
    headers = {"X-Lark-Request-Timestamp": str(now), "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": signature}
    return body, headers


def click(bot: Bot, **kwargs: Any):
    """POST a signed, encrypted click to the callback view through Django's test client."""
    body, headers = signed_callback(bot.app_id, **kwargs)
    extra = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}
    return Client().post(f"/callbacks/feishu/{bot.app_id}/", body, content_type="application/json", **extra)


def submit_value(ask, *, sender: str | None = None) -> dict[str, Any]:
    return {"kind": "feishu_ask", "act": "submit", "sessionId": ask.session_id, "requestId": ask.id, "sender": sender or ask.sender_id}


def converge(*, timeout: float = 10.0) -> int:
    """Run the worker's card sync until every Feishu card shows its latest state; returns pushes."""
    surface = FeishuSurface()
    deadline = time.monotonic() + timeout
    pushes = 0
    while time.monotonic() < deadline:
        report = SyncReport()
        pushes += surface.sync_due(timezone.now(), report)
        settle(report)  # as the worker's card-sync lane does
        if not any(m.version > m.synced_version for m in CardMessage.objects.filter(platform="feishu")):
            return pushes
        time.sleep(0.02)
    raise AssertionError("Feishu cards did not converge in time")


def message_of(card: ProgressCard) -> CardMessage:
    return CardMessage.objects.get(progress_card=card)
