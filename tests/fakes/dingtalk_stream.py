"""A fake DingTalk Stream gateway: a real WebSocket server on 127.0.0.1 (its own thread and event
loop) that accepts connections with a ticket issued by ``FakeDingTalk``'s connections/open, and
lets a test push frames (card callbacks, SYSTEM ping / disconnect), read the client's acks, go
silent, or drop the connection.

    with FakeDingTalk() as fake, FakeStreamGateway(fake) as gateway:
        ...
        gateway.wait_connected(1)
        ack = gateway.push_card_callback(payload)
"""
from __future__ import annotations

import asyncio
import itertools
import json
import queue
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import serve

TIMEOUT = 10.0  # seconds any wait in a test may take


class FakeStreamGateway:
    def __init__(self, fake):
        self.fake = fake
        self.acks: queue.Queue = queue.Queue()
        self.connections = 0
        self.rejected = 0
        self._connected = threading.Condition()
        self._current = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None
        self._ids = itertools.count(1)
        self.port = 0

    def __enter__(self) -> FakeStreamGateway:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def start():
            self._server = await serve(self._session, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()

        def run():
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-dingtalk-stream", daemon=True)
        self._thread.start()
        assert ready.wait(TIMEOUT), "fake stream gateway did not start"
        self.fake.stream_endpoint = f"ws://127.0.0.1:{self.port}/connect"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop():
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT)

    # -- the server side -----------------------------------------------------------------------

    async def _session(self, connection) -> None:
        ticket = (parse_qs(urlsplit(connection.request.path).query).get("ticket") or [""])[0]
        if not self.fake.take_ticket(ticket):
            self.rejected += 1
            await connection.close(code=4001, reason="bad ticket")
            return
        with self._connected:
            self.connections += 1
            self._current = connection
            self._connected.notify_all()
        try:
            async for message in connection:
                self.acks.put(json.loads(message))
        except Exception:
            pass

    # -- test controls (called from the test's thread) -------------------------------------------

    def wait_connected(self, count: int) -> None:
        with self._connected:
            assert self._connected.wait_for(lambda: self.connections >= count, TIMEOUT), (
                f"expected {count} connections, saw {self.connections}"
            )

    def send(self, frame: dict[str, Any]) -> None:
        connection = self._current
        sent = asyncio.run_coroutine_threadsafe(connection.send(json.dumps(frame, ensure_ascii=False)), self._loop)
        sent.result(TIMEOUT)

    def drop(self) -> None:
        """Close the TCP connection abruptly, as a network failure would."""
        connection = self._current
        self._loop.call_soon_threadsafe(connection.transport.abort)

    def push(self, kind: str, topic: str, data: str) -> str:
        message_id = f"msg-{next(self._ids)}"
        self.send({"specVersion": "1.0", "type": kind, "data": data,
                   "headers": {"topic": topic, "messageId": message_id, "contentType": "application/json",
                               "time": "0"}})
        return message_id

    def ack_for(self, message_id: str) -> dict[str, Any]:
        while True:
            ack = self.acks.get(timeout=TIMEOUT)
            if ack["headers"]["messageId"] == message_id:
                return ack
