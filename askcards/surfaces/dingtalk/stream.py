"""A small DingTalk Stream-mode client (platform reference §2.1), on ``websockets``.

One ``StreamClient`` keeps one app's connection: it asks ``/v1.0/gateway/connections/open`` for an
endpoint and a single-use ticket (a blocking HTTP call, run in a thread so the event loop never
stalls), opens the WebSocket, answers SYSTEM pings, reconnects on ``disconnect``, on errors and
when no frame at all arrived for ``watchdog_seconds`` (silent hangs, seen in the field with the
official SDK), with exponential backoff and jitter. Card callbacks go to ``handler`` — the same
one the HTTP view uses — and its reply is acknowledged as ``{"response": <reply>}``. A re-delivered
``messageId`` is acknowledged with the reply it got the first time, without running the handler.

The official ``dingtalk-stream`` package (0.24.3 on PyPI) blocks the loop on HTTP calls without a
timeout, retries with fixed sleeps and has no watchdog or stop; this client is ~200 lines instead.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import requests
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from askcards.http import jsonlimits

logger = logging.getLogger(__name__)

OPEN_PATH = "/v1.0/gateway/connections/open"
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"
USER_AGENT = "askcards-stream/1"
DEDUPE_SECONDS = 300  # DingTalk re-pushes an unacknowledged frame for about a minute
DEDUPE_MAX = 2000
MAX_FRAME_BYTES = 2**22  # the websocket's max_size: a longer message closes the connection first

Handler = Callable[[str], Awaitable[dict[str, Any]]]


class StreamError(Exception):
    """Opening a Stream connection failed (credentials, DingTalk down, a bad answer)."""


class Watchdog(Exception):
    """No frame arrived for too long: the connection is presumed dead."""


class StreamClient:
    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        base_url: str,
        handler: Handler,
        watchdog_seconds: float = 300.0,
        min_backoff: float = 1.0,
        max_backoff: float = 60.0,
        http_timeout: float = 10.0,
        max_in_flight: int = 32,
    ):
        self.client_id = client_id
        self._client_secret = client_secret
        self.base_url = base_url.rstrip("/")
        self.handler = handler
        self.watchdog_seconds = watchdog_seconds
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.http_timeout = http_timeout
        self._slots = asyncio.Semaphore(max_in_flight)
        self._seen: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self.connections = 0  # successful WebSocket opens (for operators' logs and tests)

    def __repr__(self) -> str:  # never the secret
        return f"StreamClient(client_id={self.client_id!r}, base_url={self.base_url!r})"

    # -- connection ---------------------------------------------------------------------------

    def open_connection(self) -> str:
        """The WebSocket URL (endpoint with its ticket) for one connection. Blocking."""
        body = {
            "clientId": self.client_id,
            "clientSecret": self._client_secret,
            "subscriptions": [{"type": "CALLBACK", "topic": CARD_CALLBACK_TOPIC}],
            "ua": USER_AGENT,
        }
        try:
            response = requests.post(
                self.base_url + OPEN_PATH, json=body, timeout=self.http_timeout,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
        except requests.RequestException as exc:
            raise StreamError(f"DingTalk {OPEN_PATH} did not answer: {type(exc).__name__}") from None
        try:
            data = jsonlimits.load(response.content, what=f"DingTalk's answer to {OPEN_PATH}")
        except jsonlimits.JSONRefused:
            data = None
        if response.status_code != 200 or not isinstance(data, dict):
            code = data.get("code") if isinstance(data, dict) else ""
            raise StreamError(f"DingTalk {OPEN_PATH} failed: HTTP {response.status_code} {code or ''}".rstrip())
        endpoint, ticket = data.get("endpoint"), data.get("ticket")
        if not isinstance(endpoint, str) or not isinstance(ticket, str) or not endpoint or not ticket:
            raise StreamError(f"DingTalk {OPEN_PATH} answered without endpoint and ticket")
        return f"{endpoint}{'&' if '?' in endpoint else '?'}ticket={quote(ticket, safe='')}"

    async def run_forever(self) -> None:
        """Keep the connection until cancelled."""
        attempt = 0
        while True:
            try:
                url = await asyncio.to_thread(self.open_connection)
                async with connect(url, open_timeout=self.http_timeout, max_size=MAX_FRAME_BYTES) as websocket:
                    self.connections += 1
                    attempt = 0
                    logger.info("dingtalk stream connected for app %s", self.client_id)
                    await self._serve(websocket)
                    logger.info("dingtalk stream of app %s asked to reconnect", self.client_id)
            except asyncio.CancelledError:
                raise
            except Watchdog:
                logger.warning("dingtalk stream of app %s silent for %ss; reconnecting", self.client_id,
                               self.watchdog_seconds)
            except (StreamError, OSError, WebSocketException, asyncio.TimeoutError) as exc:
                logger.warning("dingtalk stream of app %s failed: %s", self.client_id, exc)
            delay = min(self.max_backoff, self.min_backoff * 2 ** min(attempt, 16)) * random.uniform(0.8, 1.2)
            attempt += 1
            await asyncio.sleep(delay)

    # -- frames ---------------------------------------------------------------------------------

    async def _serve(self, websocket: ClientConnection) -> None:
        tasks: set[asyncio.Task[None]] = set()

        def finished(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            self._slots.release()

        try:
            while True:
                try:
                    raw = await asyncio.wait_for(websocket.recv(), timeout=self.watchdog_seconds)
                except asyncio.TimeoutError:
                    raise Watchdog() from None
                try:
                    # The callback inside ("data", a JSON string) is read, text rule and all, by
                    # the handler's parser; here only the envelope is bounded.
                    frame = jsonlimits.load(raw, what="stream frame", max_bytes=MAX_FRAME_BYTES, text=False)
                    headers = frame.get("headers") or {}
                    kind, topic = frame.get("type"), headers.get("topic")
                except (jsonlimits.JSONRefused, AttributeError) as exc:
                    logger.warning("dingtalk stream of app %s sent an unreadable frame: %s", self.client_id,
                                   exc if isinstance(exc, jsonlimits.JSONRefused) else "not an object")
                    continue
                if kind == "SYSTEM":
                    if topic == "ping":
                        await self._ack(websocket, headers, frame.get("data"))
                    elif topic == "disconnect":
                        return
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(self._dispatch(websocket, kind, topic, headers, frame.get("data")))
                tasks.add(task)
                task.add_done_callback(finished)
        finally:
            for task in tasks:
                task.cancel()

    async def _dispatch(
        self, websocket: ClientConnection, kind: str | None, topic: str | None, headers: dict[str, Any], data: Any
    ) -> None:
        try:
            await self._answer(websocket, kind, topic, headers, data)
        except WebSocketException:
            # The connection went away before the ack; DingTalk re-pushes the frame on the next one.
            logger.info("dingtalk stream of app %s closed before an ack", self.client_id)

    async def _answer(
        self, websocket: ClientConnection, kind: str | None, topic: str | None, headers: dict[str, Any], data: Any
    ) -> None:
        if kind == "EVENT":
            await self._ack(websocket, headers, json.dumps({"status": "SUCCESS", "message": "ignored"}))
            return
        if topic != CARD_CALLBACK_TOPIC or not isinstance(data, str):
            await self._ack(websocket, headers, json.dumps({"response": None}))
            return
        message_id = str(headers.get("messageId") or "")
        reply = self._remembered(message_id)
        if reply is None:
            try:
                reply = await self.handler(data)
            except Exception:
                logger.exception("dingtalk stream callback of app %s failed", self.client_id)
                await self._ack(websocket, headers, json.dumps({"response": {}}), code=500)
                return
            self._remember(message_id, reply)
        await self._ack(websocket, headers, json.dumps({"response": reply}, ensure_ascii=False))

    async def _ack(self, websocket: ClientConnection, headers: dict[str, Any], data: Any, *, code: int = 200) -> None:
        ack = {
            "code": code,
            "headers": {"messageId": headers.get("messageId", ""), "contentType": "application/json"},
            "message": "OK" if code == 200 else "error",
            "data": data if isinstance(data, str) else json.dumps(data),
        }
        await websocket.send(json.dumps(ack, ensure_ascii=False))

    def _remembered(self, message_id: str) -> dict[str, Any] | None:
        now = time.monotonic()
        while self._seen and next(iter(self._seen.values()))[0] < now - DEDUPE_SECONDS:
            self._seen.popitem(last=False)
        entry = self._seen.get(message_id) if message_id else None
        return entry[1] if entry else None

    def _remember(self, message_id: str, reply: dict[str, Any]) -> None:
        if message_id:
            self._seen[message_id] = (time.monotonic(), reply)
            while len(self._seen) > DEDUPE_MAX:
                self._seen.popitem(last=False)
