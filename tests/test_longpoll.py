"""Long-polls through the real ASGI application (project.asgi), woken through the hub."""
import asyncio
import json
import time

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator

from askcards import services
from project.asgi import application
from tests.conftest import QUESTIONS, answer_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _get(path, key, body=None, method="GET"):
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {key}".encode())]
    raw = json.dumps(body).encode() if body is not None else b""
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    return HttpCommunicator(application, method, path, body=raw, headers=headers)


async def _later(delay, fn, **kwargs):
    await asyncio.sleep(delay)
    return await database_sync_to_async(fn)(**kwargs)


async def test_wait_returns_when_answered(agent_and_key, pending_ask):
    started = time.monotonic()
    answering = asyncio.ensure_future(_later(0.3, services.ask_answer, ask_id=pending_ask.id, answers=answer_for(), surface="web"))
    response = await _get(f"/api/v1/asks/{pending_ask.id}/wait?timeout=20", agent_and_key[1]).get_response(timeout=25)
    await answering
    data = json.loads(response["body"])
    assert response["status"] == 200 and data["status"] == "answered"
    assert data["result"]["answers"][0]["selectedLabels"] == ["PostgreSQL"]
    assert time.monotonic() - started < 5


async def test_wait_times_out_with_pending_ask(agent_and_key, pending_ask):
    started = time.monotonic()
    response = await _get(f"/api/v1/asks/{pending_ask.id}/wait?timeout=1", agent_and_key[1]).get_response(timeout=10)
    assert json.loads(response["body"])["status"] == "pending"
    assert time.monotonic() - started >= 0.9


async def test_wait_on_closed_ask_returns_at_once(agent_and_key, pending_ask):
    await database_sync_to_async(services.ask_cancel)(ask=pending_ask, actor="agent:a")
    started = time.monotonic()
    response = await _get(f"/api/v1/asks/{pending_ask.id}/wait?timeout=30", agent_and_key[1]).get_response(timeout=10)
    assert json.loads(response["body"])["status"] == "cancelled"
    assert time.monotonic() - started < 3


async def test_wait_for_unknown_ask_is_404(agent_and_key):
    response = await _get("/api/v1/asks/q_" + "0" * 32 + "/wait?timeout=5", agent_and_key[1]).get_response(timeout=10)
    assert response["status"] == 404
    assert json.loads(response["body"])["error"]["code"] == "not_found"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_waiting_on_another_agents_ask_is_404_and_changes_nothing(agent_and_key, pending_ask, method):
    """The wait parks before it first reads the ask (``parks_here``): that read's refusal is still
    the API's 404, at once, and neither the ask nor the registry of waiters keeps a trace of it."""
    from askcards.wake.hub import HUB

    other_key = (await database_sync_to_async(services.agent_create)(name="agent-b"))[1]
    await database_sync_to_async(services.ask_answer)(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    started = time.monotonic()
    body = {"timeout": 30} if method == "POST" else None
    response = await _get(f"/api/v1/asks/{pending_ask.id}/wait?timeout=30", other_key, body, method=method
                          ).get_response(timeout=10)
    assert response["status"] == 404 and time.monotonic() - started < 3
    assert json.loads(response["body"])["error"]["code"] == "not_found"
    assert HUB.count() == 0
    await database_sync_to_async(pending_ask.refresh_from_db)()
    assert pending_ask.status == "answered" and pending_ask.result_delivered_at is None


async def test_wait_without_key_is_401(pending_ask):
    response = await HttpCommunicator(application, "GET", f"/api/v1/asks/{pending_ask.id}/wait", headers=[(b"host", b"testserver")]).get_response(timeout=10)
    assert response["status"] == 401


async def test_tool_call_wait_returns_tool_result(agent_and_key, present_session):
    body = {"session": present_session.key, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "wait": 20}

    async def answer_when_asked():
        for _ in range(100):
            asks = await database_sync_to_async(lambda: list(present_session.asks.values_list("id", flat=True)))()
            if asks:
                return await _later(0.2, services.ask_answer, ask_id=asks[0], answers=answer_for(custom="Oracle"), surface="web")
            await asyncio.sleep(0.05)

    answering = asyncio.ensure_future(answer_when_asked())
    response = await _get("/api/v1/tools/call", agent_and_key[1], body, method="POST").get_response(timeout=25)
    await answering
    data = json.loads(response["body"])
    assert data.get("status") == "answered", data
    assert json.loads(data["tool_result"]) == {
        "answers": [{"question": QUESTIONS[0]["question"], "selectedLabels": [], "customInput": "Oracle"}]
    }


async def test_events_long_poll_wakes_on_new_event(agent_and_key, pending_ask):
    answering = asyncio.ensure_future(_later(0.3, services.ask_cancel, ask=pending_ask, actor="agent:a"))
    started = time.monotonic()
    response = await _get("/api/v1/events?after=0&wait=20", agent_and_key[1]).get_response(timeout=25)
    await answering
    data = json.loads(response["body"])
    assert [event["type"] for event in data["events"]] == ["ask.closed"]
    assert data["last_seq"] == 1 and time.monotonic() - started < 5


async def test_events_long_poll_with_events_waiting_answers_at_once(agent_and_key, pending_ask):
    await database_sync_to_async(services.ask_cancel)(ask=pending_ask, actor="agent:a")
    started = time.monotonic()
    response = await _get("/api/v1/events?after=0&wait=30", agent_and_key[1]).get_response(timeout=10)
    data = json.loads(response["body"])
    assert [event["type"] for event in data["events"]] == ["ask.closed"] and data["last_seq"] == 1
    assert time.monotonic() - started < 3
    response = await _get("/api/v1/events?after=1&wait=1", agent_and_key[1]).get_response(timeout=10)
    assert json.loads(response["body"]) == {"events": [], "last_seq": 1}


async def test_events_long_poll_times_out_empty(agent_and_key):
    response = await _get("/api/v1/events?after=0&wait=1", agent_and_key[1]).get_response(timeout=10)
    assert json.loads(response["body"]) == {"events": [], "last_seq": 0}


async def test_wait_gets_the_answer_though_the_bus_fails_under_it(agent_and_key, pending_ask, monkeypatch):
    """Redis stops under a parked long-poll and the ask is answered on another process meanwhile
    (its wake lost): the long-poll re-reads and returns the answer within seconds, not at its
    timeout; it leaves nothing behind in the hub."""
    from askcards.wake import events
    from askcards.wake.hub import HUB
    from tests.fakes import bus as fake_bus

    bus = fake_bus.install(monkeypatch)
    key = events.ask_key(pending_ask.id)
    waiting = asyncio.ensure_future(
        _get(f"/api/v1/asks/{pending_ask.id}/wait?timeout=20", agent_and_key[1]).get_response(timeout=25)
    )
    async with asyncio.timeout(10):
        while not HUB.count(key):  # parked
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # past its read after registering
    bus.fail()
    answered_at = time.monotonic()
    with bus.elsewhere():
        await database_sync_to_async(services.ask_answer)(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    response = await waiting
    assert time.monotonic() - answered_at < 1 + 2 * events.LAYER_RETRY_SECONDS
    assert key in bus.lost_keys
    assert response["status"] == 200 and json.loads(response["body"])["status"] == "answered"
    assert HUB.count(key) == 0


# The long-poll routes are served ahead of Django (LongPollApp): a method their view has no handler
# for is its 405, with Allow, whatever body the request carries, and none of that body is read.
NOT_SERVED = [
    ("GET", "/api/v1/tools/call", "POST, OPTIONS"),
    ("DELETE", "/api/v1/tools/call", "POST, OPTIONS"),
    ("PUT", "/api/v1/asks/{ask_id}/wait", "GET, POST, HEAD, OPTIONS"),
    ("POST", "/api/v1/events", "GET, HEAD, OPTIONS"),
    ("TRACE", "/api/v1/events", "GET, HEAD, OPTIONS"),
]


@pytest.mark.parametrize("method,path,allow", NOT_SERVED, ids=[f"{m} {p}" for m, p, _ in NOT_SERVED])
@pytest.mark.parametrize("body_bytes", [0, 20, 1024 * 1024], ids=["no-body", "small-body", "1MB-streamed"])
async def test_a_method_a_long_poll_route_has_not_is_405_with_allow_and_its_body_unread(
    agent_and_key, pending_ask, method, path, allow, body_bytes
):
    from tests.security.edge_client import call

    headers = [("authorization", f"Bearer {agent_and_key[1]}"), ("content-type", "application/json")]
    if body_bytes == 20:
        exchange = await call(method, path.format(ask_id=pending_ask.id), headers=headers, body=b'{"wait": 0, "x": 1}')
    else:
        exchange = await call(method, path.format(ask_id=pending_ask.id), headers=headers, stream_bytes=body_bytes)
    assert exchange.status == 405, exchange.body[:300]
    assert exchange.headers["allow"] == allow
    error = exchange.json()["error"]
    assert error["code"] == "method_not_allowed" and method in error["message"]
    assert exchange.pulled_bytes == 0


async def test_a_method_a_long_poll_route_has_not_still_needs_the_key_first(pending_ask):
    from tests.security.edge_client import call

    exchange = await call("GET", "/api/v1/tools/call", headers=[("content-type", "application/json")], stream_bytes=1024 * 1024)
    assert exchange.status == 401
    assert exchange.json()["error"]["code"] == "not_authenticated"
    assert exchange.pulled_bytes == 0


async def test_a_parked_long_poll_holds_one_request_not_the_edges_too(agent_and_key, pending_ask):
    """While it waits, a long-poll keeps the one request its re-reads are answered through, not
    the edge's request its prologue checked the key and the length on as well: a server holding
    thousands of parked long-polls would hold thousands of each."""
    import gc

    from django.http import HttpRequest

    from askcards.wake import events
    from askcards.wake.hub import HUB

    path = f"/api/v1/asks/{pending_ask.id}/wait"
    exchange = _get(path, agent_and_key[1], body={"timeout": 20}, method="POST")
    waiting = asyncio.ensure_future(exchange.get_response(timeout=25))
    async with asyncio.timeout(10):
        while not HUB.count(events.ask_key(pending_ask.id)):  # parked
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    gc.collect()
    held = [o for o in gc.get_objects() if isinstance(o, HttpRequest) and o.path == path]
    assert len(held) == 1, f"a parked long-poll holds {len(held)} requests"
    await database_sync_to_async(services.ask_answer)(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    response = await waiting
    assert json.loads(response["body"])["status"] == "answered"


@pytest.mark.parametrize("ends", ["answered", "timed out"])
async def test_a_parked_long_poll_leaves_no_cycle_behind(agent_and_key, pending_ask, ends):
    """What a parked long-poll held is freed as it ends, answered or at its timeout (then the
    client polls again), by reference counting: none of it is left in a reference cycle, which
    only the rare collection of everything would find (tests/cycles.py)."""
    from askcards.wake import events
    from askcards.wake.hub import HUB
    from tests.cycles import Cycles

    timeout = 20 if ends == "answered" else 2
    waiting = asyncio.ensure_future(
        _get(f"/api/v1/asks/{pending_ask.id}/wait?timeout={timeout}", agent_and_key[1]).get_response(timeout=25))
    async with asyncio.timeout(10):
        while not HUB.count(events.ask_key(pending_ask.id)):  # parked
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    cycles = Cycles()
    cycles.mark()
    if ends == "answered":
        await database_sync_to_async(services.ask_answer)(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    response = await waiting
    assert json.loads(response["body"])["status"] == ("answered" if ends == "answered" else "pending")
    await asyncio.sleep(0.1)
    assert cycles.left() == []
