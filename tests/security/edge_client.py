"""Drive the real ASGI application (project.asgi) with a hand-made receive/send, counting what the
application pulls from receive(): a test can show a body was refused without being read, without
ever holding that body in memory (every chunk is the same small bytes object)."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from project.asgi import application

CHUNK = b"x" * 65536


@dataclass
class Exchange:
    status: int = 0
    headers: dict = field(default_factory=dict)  # lower-case name -> value (str)
    body: bytes = b""
    pulled_messages: int = 0  # http.request messages the application received
    pulled_bytes: int = 0  # body bytes in them

    def json(self):
        return json.loads(self.body)


async def call(
    method: str,
    path: str,
    *,
    headers=(),
    body: bytes = b"",
    stream_bytes: int = 0,
    host: str | None = "testserver",
    scheme: str = "http",
    timeout: float = 15,
    query_string: bytes | None = None,
) -> Exchange:
    """One request (``query_string``: raw bytes instead of the path's ``?…``). ``body`` is sent in one message; ``stream_bytes`` instead sends that many bytes
    in CHUNK-sized messages (chunked: no Content-Length unless ``headers`` give one). After the
    body, receive() waits until the application is done, like a client waiting for its answer."""
    path, _, query = path.partition("?")
    raw_headers = [(b"host", host.encode())] if host is not None else []
    raw_headers += [(name.encode(), value.encode()) for name, value in headers]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode() if query_string is None else query_string,
        "headers": raw_headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    exchange = Exchange()
    finished = asyncio.Event()
    if stream_bytes:
        count = -(-stream_bytes // len(CHUNK))
        messages = [{"type": "http.request", "body": CHUNK, "more_body": i < count - 1} for i in range(count)]
    else:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
    queue = iter(messages)

    async def receive():
        message = next(queue, None)
        if message is None:
            await finished.wait()
            return {"type": "http.disconnect"}
        exchange.pulled_messages += 1
        exchange.pulled_bytes += len(message["body"])
        return message

    async def send(message):
        if message["type"] == "http.response.start":
            exchange.status = message["status"]
            exchange.headers = {name.decode().lower(): value.decode() for name, value in message["headers"]}
        elif message["type"] == "http.response.body":
            exchange.body += message.get("body", b"")

    try:
        await asyncio.wait_for(application(scope, receive, send), timeout)
    finally:
        finished.set()
    return exchange
