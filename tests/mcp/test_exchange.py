"""A waiting call served as one exchange (askcards/mcp/exchange.py), through the real ASGI app."""
from __future__ import annotations

import asyncio
import gc
import json
import logging

import pytest
from channels.db import database_sync_to_async
from django.http import HttpRequest

from askcards.wake import events
from askcards import services
from askcards.wake.hub import HUB
from askcards.mcp import apps, exchange, host
from askcards.models import Ask
from tests.conftest import QUESTIONS, answer_for
from tests.cycles import Cycles
from tests.fakes import bus as fake_bus
from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def _answer_when_pending():
    async with asyncio.timeout(10):
        while True:
            ask = await database_sync_to_async(Ask.objects.filter(status=Ask.Status.PENDING).first)()
            if ask is not None:
                break
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # long enough for a few keep-alives
    await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice", answers=answer_for(), surface="web")
    return ask


async def test_a_waiting_call_streams_keep_alives_then_its_answer(agent_and_key, present_session, monkeypatch):
    monkeypatch.setattr(exchange, "PING_SECONDS", 0.1)
    answering = asyncio.create_task(_answer_when_pending())
    answer = await wire.rpc(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}})
    ask = await answering
    body = answer.exchange.body.decode()
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert body.count(": ping") >= 2 and body.index(": ping") < body.index('"result"')
    assert answer.result["isError"] is False
    assert json.loads(answer.result["content"][0]["text"]) == {"answers": answer_for()}
    assert answer.result["structuredContent"]["ask"]["id"] == ask.id


async def test_an_immediate_answer_is_one_json_reply(agent_and_key, present_session):
    answer = await wire.rpc(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": []}})
    assert answer.headers["content-type"] == "application/json"
    assert answer.result["isError"] is True and "参数无效" in answer.result["content"][0]["text"]


async def _pending_ask() -> Ask:
    async with asyncio.timeout(10):
        while True:
            ask = await database_sync_to_async(Ask.objects.filter(status=Ask.Status.PENDING).first)()
            if ask is not None:
                return ask
            await asyncio.sleep(0.05)


async def _answer(ask: Ask) -> float:
    await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice", answers=answer_for(), surface="web")
    return asyncio.get_running_loop().time()


async def _parked(ask_id: str) -> None:
    async with asyncio.timeout(10):
        while not HUB.count(events.ask_key(ask_id)):  # parked: an entry in the hub
            await asyncio.sleep(0.05)


async def test_a_waiting_call_gets_its_answer_though_the_bus_fails_under_it(
    agent_and_key, present_session, monkeypatch
):
    """Redis stops under parked calls: a call answered on another process while it is down still
    returns the answer within seconds, not at its deadline (it re-reads while the bus is down);
    once the bus is back, an answer from another process wakes a call parked during the outage."""
    bus = fake_bus.install(monkeypatch)
    loop = asyncio.get_running_loop()
    arguments = {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}

    call = asyncio.create_task(wire.rpc(agent_and_key[1], "tools/call", arguments, timeout=30))
    ask = await _pending_ask()
    await _parked(ask.id)
    await asyncio.sleep(0.2)  # past its read after registering
    bus.fail()
    with bus.elsewhere():
        answered_at = await _answer(ask)  # its wake is lost: the bus is down
    answer = await asyncio.wait_for(call, 10)
    assert loop.time() - answered_at < 1 + 2 * events.LAYER_RETRY_SECONDS
    assert events.ask_key(ask.id) in bus.lost_keys and not bus.up
    assert answer.result["isError"] is False
    assert json.loads(answer.result["content"][0]["text"]) == {"answers": answer_for()}

    # A call parked while the bus is down; the bus comes back.
    call = asyncio.create_task(wire.rpc(agent_and_key[1], "tools/call", arguments, id=2, timeout=30))
    ask = await _pending_ask()
    await asyncio.sleep(2 * events.LAYER_RETRY_SECONDS)
    assert not call.done(), "the call ended while the bus was down and its ask open"
    bus.recover()
    await asyncio.sleep(0.2)  # its re-read on the bus's return
    with bus.elsewhere():
        await _answer(ask)
    answer = await asyncio.wait_for(call, 10)
    assert json.loads(answer.result["content"][0]["text"]) == {"answers": answer_for()}
    assert HUB.count() == 0, "parked calls left entries in the hub"


async def test_a_cancel_notification_while_redis_is_down_is_accepted_not_an_error(
    agent_and_key, present_session, settings, caplog
):
    """Redis unreachable: the cancel cannot reach a call parked on another process. The
    notification is still accepted (202, as any notification), the loss is logged once, and
    nothing else changes."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    try:
        notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
        answer = await wire.post(agent_and_key[1], notification)
        assert answer.status == 202
        async with asyncio.timeout(5):  # the SDK runs notification handlers after answering
            while not any("Redis unreachable" in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.05)
        await asyncio.sleep(2.5)  # the bus tries again meanwhile, and the outage is still one line
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                and "Redis unreachable" in r.getMessage()][1:] == []
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        HUB.bus.close()


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_a_parked_call_holds_no_row_of_its_ask_and_still_returns_it_whole(era, agent_and_key, present_session,
                                                                                monkeypatch):
    """While a call waits it keeps what its progress notifications say, not the ask's row (its
    session, respondents and questions with it) nor its own arguments: a server holding a thousand
    parked calls would hold a thousand of each. Once answered it reads the ask again and returns
    all of it. The SDK connection its parked calls share is left as empty as it was."""
    option = {"label": "PostgreSQL", "description": f"Relational ({era})"}
    questions = [dict(QUESTIONS[0], options=[option, *QUESTIONS[0]["options"][1:]]), *QUESTIONS[1:]]
    arguments = {"name": "ask_user_questions", "arguments": {"questions": questions}}
    call = asyncio.create_task(wire.rpc(agent_and_key[1], "tools/call", arguments, era=era, timeout=30))
    ask_id = (await _pending_ask()).id
    await _parked(ask_id)
    await asyncio.sleep(0.2)
    gc.collect()
    held = [o for o in gc.get_objects() if isinstance(o, Ask) and o.pk == ask_id]
    assert not held, "a parked call holds its ask's row"
    requests = [o for o in gc.get_objects() if isinstance(o, HttpRequest) and o.path.startswith("/mcp")]
    assert not requests, "a parked call holds the Django request its prologue checked the key on"
    copies = [o for o in gc.get_objects()  # lists of options (a dict of strings is not tracked)
              if isinstance(o, list) and o is not questions[0]["options"] and option in o]
    assert not copies, "a parked call holds a copy of its arguments"
    assert not call.done()

    await _answer(await database_sync_to_async(Ask.objects.get)(pk=ask_id))
    answer = await asyncio.wait_for(call, 10)
    assert answer.result["isError"] is False
    assert json.loads(answer.result["content"][0]["text"]) == {"answers": answer_for()}
    returned = answer.result["structuredContent"]["ask"]
    assert (returned["id"], returned["status"], returned["questions"]) == (ask_id, "answered", questions)
    for connection in exchange._CONNECTIONS.values():
        assert connection.state == {} and not connection.exit_stack._exit_callbacks


def _host_request_id(ask_id: str) -> str:
    return host.request_id(Ask.objects.get(pk=ask_id))


def _held(ask_id: str) -> list:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, Ask) and o.pk == ask_id]


async def test_a_parked_call_putting_its_form_to_the_host_holds_no_row_either(agent_and_key, present_session,
                                                                              monkeypatch):
    """``host=ask`` on 2025-11-25: the call's stream carries ``elicitation/create``, made from the
    ask as read when it goes out, and the call still holds no row of its ask while the form is out.
    Content that does not answer the form has it put again (read again); the host's answer then
    ends the call."""
    agent, key = agent_and_key
    message, extra = wire.request("tools/call", {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}})
    declared = ("mcp-session-id", apps.session_token(agent.pk, apps.Declared(forms=True)))
    call = asyncio.create_task(wire.post(key, message, query=f"{wire.WEB}&host=ask", extra=[*extra, declared],
                                         timeout=30))
    ask_id = (await _pending_ask()).id
    await _parked(ask_id)  # and its form out
    await asyncio.sleep(0.2)
    assert not _held(ask_id), "a parked call whose form is out holds its ask's row"

    request_id = await database_sync_to_async(_host_request_id)(ask_id)
    wrong = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept", "content": {"q1": "MongoDB"}}}
    assert (await wire.post(key, wrong)).status == 202
    await asyncio.sleep(0.5)  # the form put again
    assert not _held(ask_id), "a parked call holds the row its form was put again from"
    assert not call.done()

    right = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept", "content": {"q1": "SQLite"}}}
    assert (await wire.post(key, right)).status == 202
    answer = await asyncio.wait_for(call, 10)
    forms = [m for m in answer.messages if m.get("method") == "elicitation/create"]
    assert [host.ask_of(form["id"], agent_id=agent.pk) for form in forms] == [ask_id, ask_id]  # each signed anew
    schema = forms[0]["params"]["requestedSchema"]
    assert schema["required"] == ["q1"] and forms[1]["params"] == forms[0]["params"]
    assert [option["const"] for option in schema["properties"]["q1"]["oneOf"]] == ["PostgreSQL", "SQLite"]
    assert answer.result["isError"] is False
    assert json.loads(answer.result["content"][0]["text"]) == {"answers": answer_for(labels=("SQLite",))}
    assert answer.result["structuredContent"]["ask"]["status"] == "answered"


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_a_parked_call_leaves_no_cycle_behind_once_answered(era, agent_and_key, present_session, monkeypatch):
    """What a parked call held is freed as it ends, by reference counting: none of it is left in a
    reference cycle, which only the rare collection of everything would find (tests/cycles.py).
    Its keep-alive has pinged meanwhile, and the handler may have put a request on its stream."""
    monkeypatch.setattr(exchange, "PING_SECONDS", 0.1)
    call = asyncio.create_task(wire.rpc(agent_and_key[1], "tools/call",
                                        {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}},
                                        era=era, timeout=30))
    ask = await _pending_ask()
    await _parked(ask.id)
    await asyncio.sleep(0.35)
    cycles = Cycles()
    cycles.mark()
    await _answer(ask)
    answer = await asyncio.wait_for(call, 10)
    assert answer.exchange.body.decode().count(": ping") >= 2 and answer.result["isError"] is False
    await asyncio.sleep(0.1)
    assert cycles.left() == []
