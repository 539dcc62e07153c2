"""Issue 10.3: DingTalk signs only the timestamp of an HTTP card callback, so each
(x-ddpaas-signature-timestamp, x-ddpaas-signature) pair is accepted once — a captured pair cannot
answer another ask with an attacker's body — while DingTalk's retry of a callback that failed
still goes through."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from askcards import callbacks, services
from askcards.models import Ask, CallbackReceipt, OutboxEvent
from askcards.services import dingtalk as dingtalk_services
from askcards.surfaces.dingtalk.callbacks import replay_key
from tests.dingtalk.integration import API_SECRET, QUESTIONS, create, make_session, out_track_id
from tests.fakes.dingtalk import callback_payload, signed_callback
from tests.dingtalk.conftest import bot, dingtalk_surface, fake  # noqa: F401  (the DingTalk fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]



def ask_for(agent, bot, user_id: str) -> Ask:
    session = make_session(agent, bot, key=f"dingtalk/dm/{user_id}", user_id=user_id)
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    return outcome.ask


def answer_of(ask: Ask, user_id: str, answer: str) -> dict:
    return {"out_track_id": out_track_id(ask), "user_id": user_id, "question_id": ask.id, "form": {"answer_0": answer}}


def post(bot, headers: dict, body: bytes, client: Client | None = None):
    return (client or Client()).post(
        f"/callbacks/dingtalk/{bot.app_id}/", data=body, content_type="application/json",
        headers={name: value for name, value in headers.items() if name != "Content-Type"},
    )


def test_a_captured_pair_cannot_answer_another_ask_with_another_body(agent, bot):
    mine, theirs = ask_for(agent, bot, "staff_a"), ask_for(agent, bot, "staff_b")
    headers, body = signed_callback(API_SECRET, **answer_of(mine, "staff_a", "测试"))
    assert post(bot, headers, body).status_code == 200
    assert Ask.objects.get(pk=mine.pk).status == "answered"

    forged = json.dumps(callback_payload(**answer_of(theirs, "staff_b", "生产"))).encode()
    response = post(bot, headers, forged)

    assert response.status_code == 401
    assert response.json() == {"error": "this x-ddpaas-signature-timestamp / x-ddpaas-signature pair was already used"}
    theirs = Ask.objects.get(pk=theirs.pk)
    assert theirs.status == "pending" and theirs.closed_at is None and "responses" not in theirs.result
    assert not OutboxEvent.objects.filter(ask=theirs, type="ask.closed").exists()
    # The very same request again is refused as well (and changes nothing either).
    assert post(bot, headers, body).status_code == 401


def test_a_pair_is_refused_even_with_whitespace_around_it(agent, bot):
    mine, theirs = ask_for(agent, bot, "staff_a"), ask_for(agent, bot, "staff_b")
    headers, body = signed_callback(API_SECRET, **answer_of(mine, "staff_a", "测试"))
    assert post(bot, headers, body).status_code == 200
    padded = {name: f" {value} " if name.startswith("x-ddpaas") else value for name, value in headers.items()}

    forged = json.dumps(callback_payload(**answer_of(theirs, "staff_b", "生产"))).encode()
    assert post(bot, padded, forged).status_code == 401
    assert Ask.objects.get(pk=theirs.pk).status == "pending"


def test_a_retry_of_a_callback_that_failed_goes_through(agent, bot, monkeypatch):
    ask = ask_for(agent, bot, "staff_a")
    headers, body = signed_callback(API_SECRET, **answer_of(ask, "staff_a", "测试"))
    real_click = dingtalk_services.dingtalk_click

    def click_then_fail(**kwargs):
        real_click(**kwargs)  # the whole effect is written…
        raise RuntimeError("database went away")  # …and then the callback fails

    monkeypatch.setattr(dingtalk_services, "dingtalk_click", click_then_fail)
    assert post(bot, headers, body, Client(raise_request_exception=False)).status_code == 500
    assert Ask.objects.get(pk=ask.pk).status == "pending"  # rolled back, receipt included
    assert not CallbackReceipt.objects.exists()

    monkeypatch.setattr(dingtalk_services, "dingtalk_click", real_click)
    response = post(bot, headers, body)  # DingTalk's retry: the same pair, the same body

    assert response.status_code == 200
    assert response.json()["userPrivateData"]["cardParamMap"]["user_notice"] == ""
    ask = Ask.objects.get(pk=ask.pk)
    assert ask.status == "answered"
    assert ask.result["responses"][0]["answers"] == [{"question": "环境", "answer": "测试"}]


def test_the_receipt_is_a_database_row_holding_no_signature(agent, bot):
    ask = ask_for(agent, bot, "staff_a")
    headers, body = signed_callback(API_SECRET, **answer_of(ask, "staff_a", "测试"))
    post(bot, headers, body)

    receipt = CallbackReceipt.objects.get()
    timestamp, signature = headers["x-ddpaas-signature-timestamp"], headers["x-ddpaas-signature"]
    assert (receipt.platform, receipt.event_id) == ("dingtalk", replay_key(timestamp, signature))
    assert signature not in receipt.event_id


def test_concurrent_uses_of_one_pair_take_effect_once(agent, bot):
    """Two deliveries of one pair at once (two server processes share only the database): one
    answers its ask, the other is refused and changes nothing."""
    asks = [ask_for(agent, bot, "staff_a"), ask_for(agent, bot, "staff_b")]
    headers, _ = signed_callback(API_SECRET, out_track_id="x", user_id="x")
    bodies = [json.dumps(callback_payload(**answer_of(ask, user, "测试"))).encode()
              for ask, user in zip(asks, ["staff_a", "staff_b"])]
    barrier, statuses = threading.Barrier(2), {}

    def deliver(index: int):
        try:
            barrier.wait(10)
            statuses[index] = callbacks.dingtalk_handle(bot.app_id, headers, bodies[index])[0]
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(statuses.values()) == [200, 401]
    answered = [ask.pk for ask in asks if Ask.objects.get(pk=ask.pk).status == "answered"]
    assert answered == [asks[0 if statuses[0] == 200 else 1].pk]
    assert CallbackReceipt.objects.count() == 1


def test_a_pair_is_remembered_for_as_long_as_it_can_be_accepted(agent, bot):
    ask = ask_for(agent, bot, "staff_a")
    headers, body = signed_callback(API_SECRET, **answer_of(ask, "staff_a", "测试"))
    post(bot, headers, body)
    # At most an hour of skew either way: a pair is acceptable for two hours after it was made.
    assert services.receipts_prune(now=timezone.now() + timedelta(hours=2, minutes=1)).deleted == 0
    assert CallbackReceipt.objects.count() == 1


def test_a_pair_signed_more_than_five_minutes_ago_is_refused(agent, bot):
    ask = ask_for(agent, bot, "staff_a")
    now_ms = int(time.time() * 1000)
    headers, body = signed_callback(API_SECRET, timestamp_ms=now_ms - 310_000, **answer_of(ask, "staff_a", "测试"))
    assert post(bot, headers, body).status_code == 401
    assert Ask.objects.get(pk=ask.pk).status == "pending"

    headers, body = signed_callback(API_SECRET, timestamp_ms=now_ms - 240_000, **answer_of(ask, "staff_a", "测试"))
    assert post(bot, headers, body).status_code == 200
    assert Ask.objects.get(pk=ask.pk).status == "answered"


def test_a_window_longer_than_receipts_cover_is_refused_at_startup():
    env = {**os.environ, "ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS": "3601"}
    result = subprocess.run([sys.executable, "-c", "import project.settings"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS must be <= 3600, got 3601" in result.stderr
