"""Stream mode against a fake gateway (a real WebSocket server on 127.0.0.1): the same handler as
the HTTP view, pings answered, re-deliveries acknowledged once, reconnects after a disconnect
frame, a dropped connection and a silent hang (watchdog)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import pytest

from askcards.management.commands.askcards_dingtalk_stream import client_for
from askcards.models import Ask, OutboxEvent
from askcards.surfaces.dingtalk.stream import CARD_CALLBACK_TOPIC
from tests.fakes.dingtalk import callback_payload
from tests.fakes.dingtalk_stream import FakeStreamGateway

from .integration import QUESTIONS, create, make_bot, make_session, out_track_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gateway(fake):
    with FakeStreamGateway(fake) as server:
        yield server


@pytest.fixture
def bot(fake):
    return make_bot(fake, callback_mode="stream")


@contextlib.contextmanager
def running(client):
    """Run the client's loop on its own thread; cancel it (bounded) afterwards."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(client.run_forever())
    thread = threading.Thread(target=lambda: loop.run_until_complete(asyncio.gather(task, return_exceptions=True)),
                              daemon=True)
    thread.start()
    try:
        yield client
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)
        loop.close()
        assert not thread.is_alive()


def fast_client(bot, **options):
    return client_for(bot, min_backoff=0.05, max_backoff=0.2, **{"watchdog_seconds": 30.0, **options})


def submit_frame(gateway, ask, user_id="staff_a", answer="生产"):
    payload = callback_payload(out_track_id=out_track_id(ask), user_id=user_id, question_id=ask.id,
                               form={"answer_0": answer})
    return gateway.push("CALLBACK", CARD_CALLBACK_TOPIC, json.dumps(payload, ensure_ascii=False))


def test_ping_is_answered_with_its_data(bot, gateway):
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        message_id = gateway.push("SYSTEM", "ping", json.dumps({"opaque": "abc"}))
        ack = gateway.ack_for(message_id)
    assert ack["code"] == 200 and json.loads(ack["data"]) == {"opaque": "abc"}


def test_card_callback_answers_the_ask_and_acks_the_clickers_view(agent, bot, gateway):
    session = make_session(agent, bot)
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        ack = gateway.ack_for(submit_frame(gateway, outcome.ask))
    response = json.loads(ack["data"])["response"]
    assert response["cardData"]["cardParamMap"]["question_desc"] == "已选择：生产。"
    assert Ask.objects.get(pk=outcome.ask.pk).reason == "submitted"


def test_redelivered_frame_gets_the_same_ack_and_changes_nothing(agent, bot, gateway):
    session = make_session(agent, bot)
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    payload = json.dumps(callback_payload(out_track_id=out_track_id(outcome.ask), user_id="staff_a",
                                          form={"answer_0": "测试"}))
    frame = {"specVersion": "1.0", "type": "CALLBACK", "data": payload,
             "headers": {"topic": CARD_CALLBACK_TOPIC, "messageId": "same-id", "contentType": "application/json"}}
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        gateway.send(frame)
        first = gateway.ack_for("same-id")
        gateway.send(frame)
        second = gateway.ack_for("same-id")
    assert first == second
    assert OutboxEvent.objects.filter(ask=outcome.ask, type="ask.closed").count() == 1


def test_disconnect_frame_reconnects_with_a_new_ticket(bot, gateway):
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        gateway.push("SYSTEM", "disconnect", json.dumps({"reason": "server restart"}))
        gateway.wait_connected(2)
    assert gateway.rejected == 0


def test_dropped_connection_reconnects(bot, gateway):
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        gateway.drop()
        gateway.wait_connected(2)


def test_silent_connection_is_replaced_by_the_watchdog(bot, gateway):
    with running(fast_client(bot, watchdog_seconds=0.5)):
        gateway.wait_connected(2)


def test_non_business_frame_is_acked_and_consumes_nothing(agent, bot, gateway):
    session = make_session(agent, bot)
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    noise = json.dumps(callback_payload(out_track_id=out_track_id(outcome.ask), user_id="staff_a"))
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        ack = gateway.ack_for(gateway.push("CALLBACK", CARD_CALLBACK_TOPIC, noise))
    assert ack["code"] == 200 and json.loads(ack["data"]) == {"response": {}}
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_stream_command_needs_a_stream_bot(fake):
    from django.core.management import CommandError, call_command

    make_bot(fake, callback_mode="http")
    with pytest.raises(CommandError, match="stream mode"):
        call_command("askcards_dingtalk_stream")


def test_failed_connection_open_is_retried(bot, gateway, fake):
    fake.fail("/v1.0/gateway/connections/open", status=500, code="system.busy", times=2)
    with running(fast_client(bot)):
        gateway.wait_connected(1)
    assert len(fake.requests_to("/v1.0/gateway/connections/open")) == 3


def test_slow_database_work_does_not_stall_pings(agent, bot, gateway, monkeypatch):
    """The handler's ORM work runs on a worker thread: a ping sent after a slow callback is
    answered first."""
    import time

    from askcards.management.commands import askcards_dingtalk_stream as command

    real = command.handle_sync

    def slow(bot_pk, data):
        time.sleep(1.0)
        return real(bot_pk, data)

    monkeypatch.setattr(command, "handle_sync", slow)
    session = make_session(agent, bot)
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    with running(fast_client(bot)):
        gateway.wait_connected(1)
        callback_id = submit_frame(gateway, outcome.ask)
        ping_id = gateway.push("SYSTEM", "ping", json.dumps({"opaque": "x"}))
        first = gateway.acks.get(timeout=10)
        second = gateway.acks.get(timeout=10)
    assert [first["headers"]["messageId"], second["headers"]["messageId"]] == [ping_id, callback_id]
