"""A panel socket shows every ask of its user even when the channel layer drops the push (issue 14).

channels_redis keeps the messages of all of a process's channels in ONE Redis sorted set per
process and, at the configured capacity, drops further group sends to it without an error. A
10,000-waiter run of tests/bench/bench_scaleout.py lost 155 asks that way: the process holding
both of a user's sockets fell behind, their pushes were dropped, and the tabs never showed them.

Here one ``manage.py serve --no-worker`` process on PostgreSQL + Redis holds a panel socket; the
test stalls it with SIGSTOP (a process that has fallen behind), queues pushes for it, and resumes it:

- 1500 pushes then the push of a real ask: the process queue keeps all of them (the old
  ``capacity`` of 1000 dropped the last 500 and the real ask with them) and the socket shows the ask;
- a push that is lost anyway (the test deletes the queued messages, as Redis does with any older
  than the layer's expiry): the socket's heartbeat catches up — it shows the new ask and says how
  the ask it showed ended — within one heartbeat.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from tests import serving
from tests.scale import harness

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

REDIS_DB = 12  # tests/scale/conftest.py: redis_url
FLOOD = 1500  # pushes queued for the stalled process, more than the former capacity of 1000
HEARTBEAT = 30  # askcards.surfaces.web.HEARTBEAT_SECONDS in the server
PUSH_GRACE = 5  # askcards.surfaces.web.PUSH_GRACE_SECONDS: a difference is acted on when seen twice
BZPOPMIN_TIMEOUT = 5  # channels_redis's blocking read: a stopped process's pending read ends after it

SETUP = r"""
import json, secrets
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from askcards import services
from askcards.surfaces import web
name = "pushes-" + secrets.token_hex(4)
user = get_user_model().objects.create(username=name)
store = SessionStore()
store[SESSION_KEY] = str(user.pk)
store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
store[HASH_SESSION_KEY] = user.get_session_auth_hash()
store.create()
agent, key = services.agent_create(name=name, web_users=[name], actor="test")
services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
services.session_upsert(agent=agent, key="web/" + name, platform="web", web_user=name, user_id=name)
print(json.dumps({"name": name, "cookie": settings.SESSION_COOKIE_NAME + "=" + store.session_key,
                  "group": web.panel_group(name)}))
"""

# Run in ``manage.py shell`` (the project's settings and channel layer): FLOOD pushes for asks that
# no longer exist (each shows nothing), then ``ASKS`` real asks, then the answer of ``ANSWER``.
ACT = r"""
import json
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from askcards import services
from askcards.models import Agent, Session
from askcards.surfaces import web
name, flood, asks, answer = %(name)r, %(flood)d, %(asks)d, %(answer)r
async def push_all():
    layer = get_channel_layer()
    for i in range(flood):
        await layer.group_send(web.panel_group(name), {"type": "panel.show", "ask_id": "gone%%d" %% i})
async_to_sync(push_all)()
agent, session = Agent.objects.get(name=name), Session.objects.get(key="web/" + name)
questions = [{"question": "Ship it?", "header": "Ship", "options": [{"label": "Yes"}, {"label": "No"}]}]
made = [services.tool_call(agent=agent, session=session, name="ask_user_questions",
                           arguments={"questions": questions}) for _ in range(asks)]
if answer:
    services.ask_answer(ask_id=answer, surface="feishu",
                        answers=[{"question": "Ship it?", "selectedLabels": ["Yes"], "customInput": None}])
print(json.dumps({"asks": [m.ask.id for m in made], "status": [m.status for m in made]}))
"""


@pytest.fixture(scope="module")
def server(redis_env, tmp_path_factory):
    with serving.serve_process(redis_env, "--no-worker", "--no-migrate", log_dir=tmp_path_factory.mktemp("serve")) as started:
        yield started


@pytest.fixture
def redis_client():
    import redis

    client = redis.Redis(host=harness.REDIS_HOST, port=harness.REDIS_PORT, db=REDIS_DB, socket_timeout=5)
    yield client
    client.close()


def process_queue(client, group: str) -> bytes:
    """The Redis key holding every queued message of the process whose socket is in ``group``."""
    members = client.zrange(f"asgi:group:{group}", 0, -1)
    assert len(members) == 1, f"expected the one panel socket in {group}, found {members}"
    return b"asgi" + members[0].split(b"!")[0] + b"!"


class Panel:
    """One ``/ws/panel/`` socket whose messages a background task records."""

    def __init__(self, base: str, cookie: str):
        self.url = base.replace("http://", "ws://") + "/ws/panel/"
        self.cookie, self.messages = cookie, []

    async def __aenter__(self) -> Panel:
        import aiohttp

        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(self.url, heartbeat=None, headers={
            "Cookie": self.cookie, "Origin": self.url.replace("ws://", "http://").removesuffix("/ws/panel/")})
        self.reader = asyncio.ensure_future(self._read())
        await self.until(lambda m: m["type"] == "history", 10)
        return self

    async def _read(self) -> None:
        async for msg in self.ws:
            self.messages.append(json.loads(msg.data))

    async def until(self, match, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((m for m in self.messages if match(m)), None)
            if found is not None:
                return found
            await asyncio.sleep(0.1)
        return None

    async def __aexit__(self, *exc) -> None:
        self.reader.cancel()
        await self.ws.close()
        await self.http.close()


def act(env, name: str, *, flood: int = 0, asks: int = 0, answer: str = "") -> dict:
    return serving.shell_json(env, ACT % {"name": name, "flood": flood, "asks": asks, "answer": answer})


def shown(ask_id: str):
    return lambda m: m["type"] == "ask_user_questions" and m["requestId"] == ask_id


def test_a_stalled_process_keeps_more_pushes_than_the_old_capacity(redis_env, server, redis_client):
    base, process = server
    user = serving.shell_json(redis_env, SETUP)

    async def scenario() -> None:
        async with Panel(base, user["cookie"]) as panel:
            queue = process_queue(redis_client, user["group"])
            os.kill(process.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(BZPOPMIN_TIMEOUT + 1)  # its pending read is over: nothing leaves the queue
                made = await asyncio.to_thread(act, redis_env, user["name"], flood=FLOOD, asks=1)
                assert made["status"] == ["pending"]
                queued = redis_client.zcard(queue)
            finally:
                os.kill(process.pid, signal.SIGCONT)
            assert queued == FLOOD + 1, f"the stalled process's queue kept {queued} of {FLOOD + 1} pushes"
            # Well before the heartbeat's catch-up: the push itself shows it.
            assert await panel.until(shown(made["asks"][0]), 20), panel.messages[-3:]

    asyncio.run(asyncio.wait_for(scenario(), 90))


def test_a_lost_push_is_caught_up_within_a_heartbeat(redis_env, server, redis_client):
    base, process = server
    user = serving.shell_json(redis_env, SETUP)

    async def scenario() -> None:
        async with Panel(base, user["cookie"]) as panel:
            first = (await asyncio.to_thread(act, redis_env, user["name"], asks=1))["asks"][0]
            assert await panel.until(shown(first), 10)
            queue = process_queue(redis_client, user["group"])
            os.kill(process.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(BZPOPMIN_TIMEOUT + 1)
                # The first ask is answered on Feishu, a second one asked: both pushes are lost.
                second = (await asyncio.to_thread(act, redis_env, user["name"], asks=1, answer=first))["asks"][0]
                lost = redis_client.delete(queue)
            finally:
                os.kill(process.pid, signal.SIGCONT)
            assert lost == 1, "the pushes were not queued for the stalled process"
            resumed = time.monotonic()
            assert await panel.until(shown(second), HEARTBEAT + PUSH_GRACE + 10), panel.messages[-3:]
            ended = await panel.until(lambda m: m["type"] == "ask_user_questions_cancelled"
                                      and m["requestId"] == first, 5)
            assert ended is not None and ended["reason"] == "submitted", panel.messages[-3:]
            print(f"caught up {time.monotonic() - resumed:.1f} s after the process resumed")

    asyncio.run(asyncio.wait_for(scenario(), 120))
