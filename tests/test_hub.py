"""The process's wake path (askcards/wake/hub.py, askcards/wake/bus.py): a registry from key to waiters,
fanned out in memory, and one Redis pub/sub subscription per process on scale-out."""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time

import pytest
from asgiref.sync import sync_to_async

from askcards.wake import bus as buses
from askcards.wake import hub as hubs
from tests.conftest import require_service
from tests.fakes import bus as fake_bus

pytestmark = pytest.mark.asyncio

REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 14


def wake(key: str) -> tuple[str, dict]:
    return key, {"type": "askcards.wake", "key": key}


async def test_a_publish_reaches_every_waiter_of_its_key_and_no_other():
    hub = hubs.Hub()
    async with hubs.Waiter("a", hub) as a, hubs.Waiter("b", hub) as b, hubs.Waiter("c", hub) as c:
        await a.add("ask.1")
        await b.add("ask.1")
        await c.add("ask.2")
        assert (hub.count("ask.1"), hub.count("ask.2"), hub.count()) == (2, 1, 3)
        hub.publish([wake("ask.1")])  # before anyone waits: queued, not lost
        assert await a.receive(1) == wake("ask.1")[1]
        assert await b.receive(1) == wake("ask.1")[1]
        assert await c.receive(0.2) is None
    assert hub.count() == 0 and hub.keys() == []


async def test_publishes_from_threads_reach_waiters_on_the_loop():
    """From a plain thread (the standalone worker's, a management command's) and from a thread
    the server runs sync code in (sync_to_async: handed to its loop)."""
    hub = hubs.Hub()
    async with hubs.Waiter("w", hub) as waiter:
        await waiter.add("agent.7")
        await asyncio.to_thread(hub.publish, [wake("agent.7")])
        assert await waiter.receive(2) == wake("agent.7")[1]
        await sync_to_async(hub.publish, thread_sensitive=False)([wake("agent.7")])
        assert await waiter.receive(2) == wake("agent.7")[1]


async def test_a_cancelled_waiter_leaves_the_registry():
    hub = hubs.Hub()

    async def park():
        async with hubs.Waiter("w", hub) as waiter:
            await waiter.add("ask.x")
            await waiter.add("mcp.1.abc")
            await waiter.receive(60)

    task = asyncio.ensure_future(park())
    while hub.count() < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert hub.count() == 0 and hub.keys() == []


async def test_waiters_that_come_and_go_leave_nothing_behind():
    """Thousands of parked requests answered, timed out or cancelled: the registry is empty
    after them (an entry left per waiter would be memory growing with every request)."""
    hub = hubs.Hub()

    async def park(i: int):
        async with hubs.Waiter("w", hub) as waiter:
            await waiter.add(f"ask.{i % 50}")
            await waiter.add(f"agent.{i % 7}")
            return await waiter.receive(0.5 if i % 3 else 30)

    tasks = [asyncio.ensure_future(park(i)) for i in range(3000)]
    while hub.count() < 6000:
        await asyncio.sleep(0.01)
    assert len(hub.keys()) == 57
    hub.publish([wake(f"ask.{i}") for i in range(50)])  # the long waits woken, the others time out
    for task in tasks[1::10]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    hub.publish([wake("ask.1")])  # to nobody
    assert hub.count() == 0 and hub.keys() == [] and hub._members == {}


async def test_a_waiters_inbox_is_bounded():
    hub = hubs.Hub()
    async with hubs.Waiter("w", hub) as waiter:
        await waiter.add("ask.1")
        hub.publish([("ask.1", {"type": "n", "n": n}) for n in range(hubs.INBOX_LIMIT + 500)])
        assert len(waiter._inbox) == hubs.INBOX_LIMIT
        assert await waiter.receive(1) == {"type": "n", "n": 500}  # the oldest were dropped, the newest kept


async def test_while_the_bus_is_down_waiters_re_read_every_second_and_once_more_when_it_is_back(monkeypatch):
    hub = hubs.Hub()
    bus = fake_bus.install(monkeypatch, hub)
    async with hubs.Waiter("w", hub) as waiter:
        await waiter.add("ask.1")
        receiving = asyncio.ensure_future(waiter.receive(60))
        await asyncio.sleep(0.1)
        bus.fail()  # lost: the long wait is told to re-read at once
        assert await asyncio.wait_for(receiving, 1) == {"type": hubs.REREAD}
        started = time.monotonic()
        assert await waiter.receive(60) == {"type": hubs.REREAD}
        assert hubs.LAYER_RETRY_SECONDS * 0.9 <= time.monotonic() - started < hubs.LAYER_RETRY_SECONDS * 2
        hub.publish([wake("ask.1")])  # this process's own publish needs no bus
        assert await waiter.receive(60) == wake("ask.1")[1]
        assert bus.lost == [wake("ask.1")]  # the other processes' copy was lost
        assert await waiter.receive(0.3) is None  # a timeout shorter than the retry is a timeout
        bus.recover()
        assert await waiter.receive(0.1) == {"type": hubs.REREAD}
        assert await waiter.receive(0.5) is None  # back to waiting for a message


# ------------------------------------------------------------------------------------- Redis


def redis_hub(url: str) -> hubs.Hub:
    """A hub with its own bus on ``url``: one "process" of a test that holds several."""
    from django.conf import settings

    hub = hubs.Hub()
    hub._bus, hub._bus_url = buses.RedisBus(hub, url), settings.REDIS_URL
    return hub


@pytest.fixture
def redis_url():
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"


@pytest.fixture
def redis_client(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield client
    client.close()


async def until(condition, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


async def test_a_publish_in_one_process_wakes_a_waiter_in_another_through_redis(redis_url, redis_client):
    a, b = redis_hub(redis_url), redis_hub(redis_url)
    key = "ask.q_" + secrets.token_hex(16)
    channel = a.bus.channel(key)
    try:
        async with hubs.Waiter("w", a) as waiter:
            await waiter.add(key)  # returns once Redis has subscribed process A
            assert dict(redis_client.pubsub_numsub(channel)) == {channel.encode(): 1}
            await asyncio.to_thread(b.publish, [wake(key)])  # B without a loop: sent before returning
            assert await waiter.receive(5) == wake(key)[1]
            b.publish([wake(key)])  # B from its loop: queued to its publisher
            assert await waiter.receive(5) == wake(key)[1]
            a.publish([wake(key)])  # A's own: delivered in memory, once (its copy from Redis skipped)
            assert await waiter.receive(2) == wake(key)[1]
            assert await waiter.receive(0.5) is None
        await until(lambda: not dict(redis_client.pubsub_numsub(channel))[channel.encode()])  # unsubscribed
    finally:
        a.bus.close()
        b.bus.close()


async def test_a_killed_subscription_costs_a_re_read_not_a_wake(redis_url, redis_client, caplog):
    """Redis drops process A's subscription (CLIENT KILL): what B publishes meanwhile is lost, A's
    waiters re-read at once and again once A has subscribed anew; later wakes reach them. One
    warning for the outage, one line when it is over."""
    a, b = redis_hub(redis_url), redis_hub(redis_url)
    key = "ask.q_" + secrets.token_hex(16)
    caplog.set_level(logging.WARNING, logger="askcards.wake.bus")
    try:
        async with hubs.Waiter("w", a) as waiter:
            await waiter.add(key)
            await until(lambda: a.bus_up)
            # A and B share this pid: A's connection is the one subscribed to the key's channel too.
            mine = [c for c in redis_client.client_list(_type="pubsub")
                    if c.get("name") == f"askcards-bus-{os.getpid()}" and int(c.get("sub", 0)) >= 2]
            killed = 0
            for client in mine:
                killed += redis_client.execute_command("CLIENT", "KILL", "ID", client["id"], "SKIPME", "yes") or 0
            assert killed >= 1
            assert await waiter.receive(5) == {"type": hubs.REREAD}  # lost: re-read at once
            await until(lambda: a.bus_up)
            rereads = 0  # while it was down (every second), and once it was back
            while waiter._inbox or rereads == 0:
                assert await waiter.receive(5) == {"type": hubs.REREAD}
                rereads += 1
            b.publish([wake(key)])
            assert await waiter.receive(5) == wake(key)[1]
        outage = [r.getMessage() for r in caplog.records if "Redis unreachable" in r.getMessage()]
        assert len(outage) == 1 and any("Redis is back" in r.getMessage() for r in caplog.records)
    finally:
        a.bus.close()
        b.bus.close()
