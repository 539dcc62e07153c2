"""Raw MCP requests to ``/mcp`` through the real ASGI application (``project.asgi``), for the
security tests: hand-built JSON-RPC bodies and headers an SDK client would never send, the answer
read back whichever way the SDK framed it (a JSON body, or one SSE stream of JSON-RPC messages).

``endless`` drives an application with a request body that never ends, counting what it pulls
from receive(): a refusal "without reading" is then observable, and nothing big is allocated."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from tests.security.edge_client import CHUNK, Exchange, call

LEGACY = "2025-11-25"  # the initialize-era revision (tasks live here)
MODERN = "2026-07-28"  # the stateless revision: every request carries its envelope in params._meta
WEB = "session=web/alice&platform=web&web_user=alice"  # conftest's web_session of agent-a
ACCEPT = "application/json, text/event-stream"


def headers(key: str | None = None, *, version: str | None = LEGACY, origin: str | None = None, extra=()) -> list:
    """The headers an MCP client sends on a POST (Bearer key, JSON, both Accept types)."""
    result = [("content-type", "application/json"), ("accept", ACCEPT)]
    if key is not None:
        result.append(("authorization", f"Bearer {key}"))
    if version is not None:
        result.append(("mcp-protocol-version", version))
    if origin is not None:
        result.append(("origin", origin))
    return result + list(extra)


def request(method: str, params: dict | None = None, *, id=1, era: str = LEGACY) -> tuple[dict, list]:
    """A well-formed JSON-RPC request of ``era`` and the per-request headers that era wants
    (2026-07-28: the ``_meta`` envelope, ``Mcp-Method`` and, for tools/call and tasks/*,
    ``Mcp-Name``)."""
    params = dict(params or {})
    extra = []
    if era == MODERN:
        meta = dict(params.get("_meta") or {})
        meta.setdefault("io.modelcontextprotocol/protocolVersion", MODERN)
        meta.setdefault("io.modelcontextprotocol/clientCapabilities", {})
        params["_meta"] = meta
        if method.isascii():  # header values are bytes; others go without (the SDK then says they mismatch)
            extra.append(("mcp-method", method))
        name = params.get("name") if method == "tools/call" else params.get("taskId") if method.startswith("tasks/") else None
        if isinstance(name, str) and name.isascii():  # the tasks extension routes tasks/* by their task id
            extra.append(("mcp-name", name))
    message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params:
        message["params"] = params
    return message, extra


@dataclass
class Answer:
    exchange: Exchange
    messages: list  # the JSON-RPC messages of the body (one JSON body, or each SSE "data:")

    @property
    def status(self) -> int:
        return self.exchange.status

    @property
    def headers(self) -> dict:
        return self.exchange.headers

    @property
    def final(self) -> dict:
        """The last message: the response to the request (notifications come before it)."""
        assert self.messages, f"no JSON-RPC message in {self.exchange.status} {self.exchange.body[:300]!r}"
        return self.messages[-1]

    @property
    def error(self) -> dict | None:
        return self.final.get("error")

    @property
    def result(self) -> dict:
        assert "result" in self.final, self.final
        return self.final["result"]


def messages_of(exchange: Exchange) -> list:
    content_type = exchange.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        found = []
        for event in exchange.body.decode("utf-8").replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
            if data:
                found.append(json.loads(data))
        return found
    if content_type.startswith("application/json") and exchange.body:
        return [json.loads(exchange.body)]
    return []


async def post(
    key: str | None,
    body: bytes | dict,
    *,
    query: str = WEB,
    version: str | None = LEGACY,
    extra=(),
    origin: str | None = None,
    host: str | None = "testserver",
    scheme: str = "http",
    timeout: float = 15,
) -> Answer:
    """One POST /mcp; ``body`` a JSON-RPC message (dict/list) or raw bytes."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = headers(key, version=version, origin=origin, extra=extra) + [("content-length", str(len(raw)))]
    path = f"/mcp?{query}" if query else "/mcp"
    exchange = await call("POST", path, headers=hdrs, body=raw, host=host, scheme=scheme, timeout=timeout)
    return Answer(exchange, messages_of(exchange))


async def rpc(key: str, method: str, params: dict | None = None, *, era: str = LEGACY, query: str = WEB, id=1,
              **options) -> Answer:
    """A well-formed request of ``era`` (see ``request``)."""
    message, extra = request(method, params, id=id, era=era)
    return await post(key, message, query=query, version=era, extra=extra, **options)


@dataclass
class Endless:
    status: int = 0
    headers: dict | None = None
    body: bytes = b""
    pulled_messages: int = 0
    pulled_bytes: int = 0

    def json(self):
        return json.loads(self.body)


def _scope(method: str, path: str, query: bytes, headers, host: bytes = b"testserver") -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query,
        "headers": [(b"host", host)] + [(n.encode(), v.encode("latin-1")) for n, v in headers],
        "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000),
    }


async def _drive(app, scope, receive, timeout: float) -> Endless:
    seen = Endless()

    async def counted():
        message = await receive()
        if message["type"] == "http.request":
            seen.pulled_messages += 1
            seen.pulled_bytes += len(message.get("body", b""))
        return message

    async def send(message):
        if message["type"] == "http.response.start":
            seen.status = message["status"]
            seen.headers = {name.decode().lower(): value.decode() for name, value in message["headers"]}
        elif message["type"] == "http.response.body":
            seen.body += message.get("body", b"")

    await asyncio.wait_for(app(scope, counted, send), timeout)
    return seen


async def endless(app, path: str, headers, *, query: str = "", timeout: float = 15) -> Endless:
    """POST to ``app`` a body that never ends (CHUNK after CHUNK, always ``more_body``).
    The application has to answer without waiting for its end: a test proves how much it read."""

    async def receive():
        await asyncio.sleep(0)  # a client that keeps sending, never the end
        return {"type": "http.request", "body": CHUNK, "more_body": True}

    return await _drive(app, _scope("POST", path, query.encode(), headers), receive, timeout)
