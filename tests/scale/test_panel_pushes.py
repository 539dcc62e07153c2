"""A panel socket shows every ask of its user even when the bus drops the push (issue 14, issue 26).

Pushes cross processes over Redis pub/sub (askcards.wake.bus): each process has one subscriber
connection, subscribed to the keys it has members for (a panel socket: its user's key). A run of
tests/bench/bench_scaleout.py once lost asks when a process holding both of a user's sockets fell
behind and the former channel layer dropped their pushes.

Here one ``manage.py serve --no-worker`` process on PostgreSQL + Redis holds a panel socket; the
test stalls it with SIGSTOP (a process that has fallen behind), publishes pushes for it, and
resumes it:

- 1500 pushes then the push of a real ask: they wait for the stalled subscriber (in Redis's output
  buffer and the sockets' buffers) and the socket shows the ask as soon as the process runs again;
- pushes that are lost anyway (the test kills the stalled process's subscriber connection, as
  Redis does with a client past its output buffer's limit, and publishes while it cannot subscribe
  again): the socket's heartbeat catches up — it shows the new ask and says how the ask it showed
  ended — within one heartbeat.
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

SETUP = r"""
import json, secrets
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from askcards import services
from askcards.wake.bus import channel_prefix
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
                  "channel": channel_prefix(settings.REDIS_URL) + web.panel_key(name)}))
"""

# Run in ``manage.py shell`` (the project's settings, REDIS_URL the bus): FLOOD pushes for asks
# that no longer exist (each shows nothing), then ``ASKS`` real asks, then the answer of ``ANSWER``.
ACT = r"""
import json
from askcards import services
from askcards.wake import events
from askcards.models import Agent, Session
from askcards.surfaces import web
name, flood, asks, answer = %(name)r, %(flood)d, %(asks)d, %(answer)r
events.publish([(web.panel_key(name), {"type": "panel.show", "ask_id": "gone%%d" %% i}) for i in range(flood)])
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


def subscriber(client, channel: str, pid: int) -> dict:
    """The bus connection of process ``pid``, once it has subscribed to ``channel``."""
    deadline = time.monotonic() + 10
    while not client.pubsub_numsub(channel)[0][1]:
        assert time.monotonic() < deadline, f"no process subscribed to {channel}"
        time.sleep(0.05)
    (found,) = [c for c in client.client_list(_type="pubsub") if c.get("name") == f"askcards-bus-{pid}"]
    return found


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


def test_a_stalled_process_gets_every_push_once_it_runs_again(redis_env, server, redis_client):
    base, process = server
    user = serving.shell_json(redis_env, SETUP)

    async def scenario() -> None:
        async with Panel(base, user["cookie"]) as panel:
            subscriber(redis_client, user["channel"], process.pid)
            os.kill(process.pid, signal.SIGSTOP)
            try:
                made = await asyncio.to_thread(act, redis_env, user["name"], flood=FLOOD, asks=1)
                assert made["status"] == ["pending"]
            finally:
                os.kill(process.pid, signal.SIGCONT)
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
            os.kill(process.pid, signal.SIGSTOP)
            try:
                # Its subscription is cut while it cannot subscribe again; then the first ask is
                # answered on Feishu and a second one asked: Redis has nobody to hand both pushes to.
                redis_client.client_kill_filter(_id=subscriber(redis_client, user["channel"], process.pid)["id"])
                second = (await asyncio.to_thread(act, redis_env, user["name"], asks=1, answer=first))["asks"][0]
            finally:
                os.kill(process.pid, signal.SIGCONT)
            resumed = time.monotonic()
            assert await panel.until(shown(second), HEARTBEAT + PUSH_GRACE + 10), panel.messages[-3:]
            ended = await panel.until(lambda m: m["type"] == "ask_user_questions_cancelled"
                                      and m["requestId"] == first, 5)
            assert ended is not None and ended["reason"] == "submitted", panel.messages[-3:]
            print(f"caught up {time.monotonic() - resumed:.1f} s after the process resumed")

    asyncio.run(asyncio.wait_for(scenario(), 120))
