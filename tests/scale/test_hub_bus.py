"""Wakes across processes through the bus (askcards/wake/bus.py: Redis pub/sub, one subscription per
process), and what a lost wake costs (issue 26).

Two ``manage.py serve`` processes, A (with the worker) and B (``--no-worker``), on one PostgreSQL
database and a Redis server of the module's own (its ACL and its clients are the test's to
change). alice's panel socket is on B; asks are made and long-polled on A:

- an ask made on A is pushed to the panel on B, and a long-poll parked on A is woken by alice's
  answer on B, each within seconds (its heartbeat, its timeout are far later);
- the bus drops wakes (Redis refuses B's publishes): a long-poll still returns the answer at its
  timeout's final read, and when A's subscription is cut (CLIENT KILL) its waiters re-read at
  once and return the answers. Nothing is lost, each process logs the outage once, and wakes
  cross again afterwards.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests import serving
from tests.conftest import require
from tests.mcp import support
from tests.scale import harness

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WAKE_WITHIN = 5  # seconds from an event on one process to the push or wake on the other
SEED = support.SEED.replace('print(json.dumps({"key": key, "other_key": other_key}))', """
services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
services.session_upsert(agent=agent, key="web/alice", platform="web", web_user="alice", user_id="alice")
print(json.dumps({"key": key}))""")


@dataclass
class Deployment:
    redis: harness.PrivateRedis
    a: str
    b: str
    log_a: Path
    log_b: Path
    key: str
    cookie_b: str


@pytest.fixture(scope="module")
def deployment(pg_db, tmp_path_factory):
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    redis = harness.PrivateRedis()
    with contextlib.ExitStack() as stack:
        stack.callback(redis.kill)
        redis.start()
        env = {**pg_db.env, "REDIS_URL": redis.url}
        seed = serving.shell_json(env, SEED)
        log_a, log_b = tmp_path_factory.mktemp("serve-a"), tmp_path_factory.mktemp("serve-b")
        a = stack.enter_context(serving.serve(env, "--no-migrate", log_dir=log_a))
        b = stack.enter_context(serving.serve(env, "--no-migrate", "--no-worker", log_dir=log_b))
        yield Deployment(redis, a, b, log_a / "serve.log", log_b / "serve.log", seed["key"], support.login_cookie(b))


def redis_client(d: Deployment):
    import redis

    return redis.Redis(port=d.redis.port, socket_timeout=5)


def create(d: Deployment) -> str:
    """A new ask of alice's, on A (pending: her panel on B is open)."""
    response = requests.post(f"{d.a}/api/v1/tools/call", headers={"Authorization": f"Bearer {d.key}"}, timeout=10,
                             json={"session": "web/alice", "name": "ask_user_questions",
                                   "arguments": {"questions": support.QUESTIONS}})
    assert response.status_code == 200 and response.json()["status"] == "pending", response.text
    return response.json()["ask"]["id"]


@dataclass
class LongPoll:
    """``GET /asks/<id>/wait`` on A, on a thread: what it returned and when."""

    d: Deployment
    ask_id: str
    timeout: int
    result: dict = field(default_factory=dict)

    def __post_init__(self):
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        response = requests.get(f"{self.d.a}/api/v1/asks/{self.ask_id}/wait", params={"timeout": self.timeout},
                                headers={"Authorization": f"Bearer {self.d.key}"}, timeout=self.timeout + 15)
        self.result.update(status=response.status_code, ask=response.json(), at=time.monotonic())

    def parked(self) -> None:
        """A has subscribed to the ask's channel, and the poll's read after that is done."""
        client = redis_client(self.d)
        channel = f"askcards:0:ask.{self.ask_id}"
        try:
            deadline = time.monotonic() + 10
            while not client.pubsub_numsub(channel)[0][1]:
                assert time.monotonic() < deadline, f"A never subscribed to {channel}"
                time.sleep(0.05)
        finally:
            client.close()
        time.sleep(0.5)
        assert self.thread.is_alive(), f"the long-poll returned before the answer: {self.result}"

    async def answered(self, within: float) -> float:
        """Seconds until it returned the answered ask (at most ``within``)."""
        start = time.monotonic()
        await asyncio.to_thread(self.thread.join, within)
        assert not self.thread.is_alive(), f"the long-poll of {self.ask_id} still waits after {within} s"
        assert self.result["status"] == 200 and self.result["ask"]["status"] == "answered", self.result
        return self.result["at"] - start


async def shown(panel: support.Panel, ask_id: str) -> None:
    while (await panel.next_ask())["requestId"] != ask_id:
        pass


def outages(log: Path) -> int:
    return log.read_text(errors="replace").count("Redis unreachable")


def test_a_push_and_a_wake_cross_processes(deployment):
    d = deployment

    async def scenario() -> None:
        async with support.Panel.open(d.b, d.cookie_b) as panel:
            made_at = time.monotonic()
            ask_id = await asyncio.to_thread(create, d)
            await asyncio.wait_for(shown(panel, ask_id), WAKE_WITHIN)  # pushed from A to B
            pushed = time.monotonic() - made_at

            poll = LongPoll(d, ask_id, timeout=60)
            await asyncio.to_thread(poll.parked)
            ack = await panel.answer(ask_id)  # on B
            assert ack["ok"], ack
            woken = await poll.answered(WAKE_WITHIN)
            print(f"\npanel push A→B within {pushed:.2f} s of the ask; long-poll on A woken {woken:.2f} s "
                  "after the answer on B")

    asyncio.run(asyncio.wait_for(scenario(), 90))


def test_lost_wakes_cost_a_re_read_never_an_answer(deployment):
    d = deployment
    client = redis_client(d)
    before = outages(d.log_a), outages(d.log_b)

    async def scenario() -> None:
        async with support.Panel.open(d.b, d.cookie_b) as panel:
            short_id, long_id = [await asyncio.to_thread(create, d) for _ in range(2)]
            short, long = LongPoll(d, short_id, timeout=4), LongPoll(d, long_id, timeout=60)
            await asyncio.to_thread(short.parked)
            await asyncio.to_thread(long.parked)
            client.execute_command("ACL", "SETUSER", "default", "-publish")  # the bus drops every wake
            try:
                for ask_id in (short_id, long_id):
                    ack = await panel.answer(ask_id)
                    assert ack["ok"], ack
                # No wake came: the short poll returns the answer at its timeout (its final read).
                await short.answered(10)
                assert short.result["at"] - short.started > 3.5, "woken though Redis refused every publish"
                await asyncio.sleep(1)
                assert long.thread.is_alive(), "a wake crossed though Redis refused every publish"
                # A's subscription cut: A's waiters re-read at once, B's publishes still refused.
                killed = client.client_kill_filter(_type="pubsub")
                assert killed >= 1
                assert await long.answered(WAKE_WITHIN) < WAKE_WITHIN
            finally:
                client.execute_command("ACL", "SETUSER", "default", "+publish")

            # The bus is whole again once B has subscribed anew (what A publishes before that is
            # lost: the panel would show it at its heartbeat); then pushes and wakes cross again.
            panel_channel = "askcards:0:panel." + hashlib.sha256(b"alice").hexdigest()[:32]
            async with asyncio.timeout(10):
                while not client.pubsub_numsub(panel_channel)[0][1]:
                    await asyncio.sleep(0.05)
            ask_id = await asyncio.to_thread(create, d)
            await asyncio.wait_for(shown(panel, ask_id), 2 * WAKE_WITHIN)
            poll = LongPoll(d, ask_id, timeout=60)
            await asyncio.to_thread(poll.parked)
            assert (await panel.answer(ask_id))["ok"]
            await poll.answered(WAKE_WITHIN)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        client.close()
    assert (outages(d.log_a) - before[0], outages(d.log_b) - before[1]) == (1, 1), "one warning per outage"
