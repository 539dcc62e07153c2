"""Driving a real ``manage.py serve`` over MCP with the official SDK's own client.

- ``SEED``: an agent ``mcp-agent`` granted web user ``alice`` (password ``pw``), a second agent
  ``other-agent``; the seed's JSON gives both keys.
- ``client(base, key, query)``: ``mcp.Client`` over ``streamable_http_client`` with the Bearer
  header (``mode`` "legacy" = the initialize handshake, "2026-07-28" = the stateless revision).
- ``Panel``: alice's panel socket on the same server (a real WebSocket, a real session cookie),
  which answers asks the way the web page does.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, AsyncIterator

import httpx2
import websockets
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests import serving
from tests.conftest import QUESTIONS  # noqa: F401  (re-exported: the questions every MCP test asks)

SEED = """
import json
from django.contrib.auth import get_user_model
from askcards import services
get_user_model().objects.create_user("alice", password="pw")
agent, key = services.agent_create(name="mcp-agent", web_users=["alice"])
other, other_key = services.agent_create(name="other-agent", web_users=["alice"])
print(json.dumps({"key": key, "other_key": other_key}))
"""

WEB_SESSION = "session=mcp-web&platform=web&web_user=alice"
TIMEOUT = 30  # seconds: every wait in these tests is bounded


def http_client(key: str | None, **headers: str) -> httpx2.AsyncClient:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(TIMEOUT, read=120))


@contextlib.asynccontextmanager
async def client(base: str, key: str, query: str = WEB_SESSION, *, mode: str = "legacy", **options: Any) -> AsyncIterator[Client]:
    url = f"{base}/mcp?{query}" if query else f"{base}/mcp"
    async with Client(streamable_http_client(url, http_client=http_client(key)), mode=mode, **options) as mcp:
        yield mcp


def login_cookie(base: str) -> str:
    """alice's session cookie, signed in through the real /login/ form."""
    import requests

    with requests.Session() as browser:
        page = browser.get(f"{base}/login/", timeout=TIMEOUT)
        token = browser.cookies["csrftoken"]
        browser.post(
            f"{base}/login/",
            data={"username": "alice", "password": "pw", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{base}/login/"},
            timeout=TIMEOUT,
        )
        assert page.ok and "sessionid" in browser.cookies, "alice could not sign in"
        return browser.cookies["sessionid"]


class Panel:
    """alice's panel socket: ``next_ask()`` waits for an ask to be shown, ``answer()`` answers it."""

    def __init__(self, socket):
        self.socket = socket

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, base: str, cookie: str) -> AsyncIterator["Panel"]:
        ws_url = base.replace("http://", "ws://") + "/ws/panel/"
        async with websockets.connect(ws_url, additional_headers={"Cookie": f"sessionid={cookie}", "Origin": base}) as socket:
            yield cls(socket)

    async def receive(self, kind: str) -> dict:
        async with asyncio.timeout(TIMEOUT):
            while True:
                message = json.loads(await self.socket.recv())
                if message.get("type") == kind:
                    return message

    async def next_ask(self) -> dict:
        return await self.receive("ask_user_questions")

    async def answer(self, ask_id: str, labels=("PostgreSQL",), custom=None) -> dict:
        answers = [{"question": QUESTIONS[0]["question"], "selectedLabels": list(labels), "customInput": custom}]
        await self.socket.send(json.dumps({"type": "ask_user_questions_result", "requestId": ask_id, "answers": answers}))
        return await self.receive("ask_user_questions_ack")


def seeded(data_dir, **env: str):
    """``serving.seeded`` with ``SEED``; extra environment for the server in ``env``."""
    return serving.seeded(data_dir, SEED) if not env else _seeded_with(data_dir, env)


@contextlib.contextmanager
def _seeded_with(data_dir, extra: dict[str, str]):
    service_env = {**serving.service_env(data_dir), **extra}
    serving.manage(service_env, "migrate", "-v0")
    seed = serving.shell_json(service_env, SEED)
    with serving.serve(service_env) as base:
        yield base, seed
