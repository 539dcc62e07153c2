"""A parked request as one exchange: the calls that wait (``tools/call``, ``tasks/result``),
served without the SDK's per-request machinery, on both protocol eras.

The SDK's stateless Streamable HTTP path builds a whole server connection for every POST (its
router, a dispatcher loop, four memory-stream pairs and an ``EventSourceResponse`` with five tasks
of its own: eleven tasks per parked call, several times a REST long-poll's memory in
``bench_mcp``). A parked call needs one task: this module runs the request through the
SDK's own kernel (``serve_one``: its validation, middleware, handlers and result serialization,
the same as on its transport) and frames the answer itself the way the SDK frames a 2026-07-28
exchange: JSON when the handler answers before anything else was sent, else an SSE stream of its
notifications and the response, with a keep-alive comment every ``PING_SECONDS``. A dropped
connection cancels the handler (which leaves the ask as it is). A 2026-07-28 request passes the
SDK's own envelope checks first (``classify_inbound_request``); one they refuse, or one carrying
``Mcp-Param-*`` headers to validate, is left to the SDK's transport, like everything else
(``initialize``, notifications, the other methods).

A handler may also put a request of the server's on the stream (``OUTBOUND`` in the request's
scope, given a ``JSONRPCRequest``: the host surface's ``elicitation/create`` on the handshake
revisions, ``askcards.mcp.host``). It is sent and not awaited: its response comes back as a POST
of its own, to any process.
"""
from __future__ import annotations

import asyncio
import json
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Mapping

import anyio
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, aclose_shielded, modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request

PARKED_METHODS = frozenset({"tools/call", "tasks/result"})
OUTBOUND = "askcards.outbound"  # scope key: await emit(JSONRPCRequest) puts a server's request on this stream
PING_SECONDS = 15.0
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(frozen=True, slots=True)
class Parked:
    """A request this module serves: the parsed message's own id, method and params (validated as
    a ``JSONRPCRequest``, whose copy is not kept) and the protocol version it speaks."""

    id: Any
    method: str
    params: dict[str, Any] | None
    version: str


def parked_request(message: Any, scope) -> Parked | None:
    """The request and its envelope when this POST is one this module serves. Anything the SDK's
    transport would refuse (a malformed message or envelope, a duplicated routing header,
    ``Mcp-Param-*`` headers to check) is left to it, which words the refusal."""
    if not isinstance(message, dict) or message.get("method") not in PARKED_METHODS or message.get("id") is None:
        return None
    raw_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())]
    version = next((v for k, v in raw_headers if k.lower() == "mcp-protocol-version"), None)
    try:
        JSONRPCRequest.model_validate(message)
    except ValidationError:
        return None
    if version in HANDSHAKE_PROTOCOL_VERSIONS:
        return Parked(message["id"], message["method"], message.get("params"), version)
    if version not in MODERN_PROTOCOL_VERSIONS or find_duplicated_routing_header(raw_headers) is not None:
        return None
    if any(k.lower().startswith(MCP_PARAM_HEADER_PREFIX.lower()) for k, _ in raw_headers):
        return None
    route = classify_inbound_request(message, headers={k.lower(): v for k, v in raw_headers})
    if not isinstance(route, InboundModernRoute):
        return None
    return Parked(message["id"], message["method"], message.get("params"), route.protocol_version)


class _Exchange:
    """The SDK's ``DispatchContext`` for one POST: notifications go onto this response; no
    server-to-client requests (stateless HTTP has nowhere for their answers to land).

    What the SDK reads of it once (the transport's facts, the message metadata carrying the HTTP
    request) is made when read, not kept for as long as the call is parked."""

    __slots__ = ("_request", "request_id", "progress_token", "_cancel_requested", "_emit")
    can_send_request = False

    def __init__(self, request: Request, request_id, progress_token, emit):
        self._request = request
        self.request_id = request_id
        self.progress_token = progress_token
        self._cancel_requested: anyio.Event | None = None
        self._emit = emit

    @property
    def transport(self) -> TransportContext:
        return TransportContext(kind="streamable-http", can_send_request=False, headers=self._request.headers)

    @property
    def message_metadata(self) -> ServerMessageMetadata:
        return ServerMessageMetadata(request_context=self._request)

    @property
    def cancel_requested(self) -> anyio.Event:
        """Made when first read (askcards' handlers never do): an event is a deque and more, and
        every parked call has an exchange."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts=None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts=None) -> None:
        await self._emit(JSONRPCNotification(jsonrpc="2.0", method=method, params=dict(params) if params else None))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


_CONNECTIONS: dict[str, Connection] = {}


def _connection(version: str) -> Connection:
    """The SDK's connection for a parked request of this protocol version: one per version, shared
    by every parked call. It carries no client identity (askcards' handlers never read it; the
    SDK's stateless legacy path builds its connections the same way) and nothing per call: the SDK
    writes to a connection only on ``initialize``, and askcards' handlers keep nothing in its
    ``state`` or ``exit_stack`` (tests/mcp/test_exchange.py checks both stay empty), so closing
    its empty exit stack at each call's end, as ``serve_one`` does, closes nothing of another's."""
    connection = _CONNECTIONS.get(version)
    if connection is None:
        connection = _CONNECTIONS[version] = Connection.from_envelope(version, None, None)
    return connection


def _frame(message) -> bytes:
    data = json.dumps(message.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":"))
    return f"event: message\r\ndata: {data}\r\n\r\n".encode()


async def accepted(security: TransportSecuritySettings, scope) -> bool:
    """Whether this POST passes the SDK transport's rules (Content-Type, Host and Origin, an
    ``Accept`` of both JSON and SSE); else the SDK's transport serves it, which words the refusal."""
    # On a copy of the scope: Starlette swaps a scope's header list for a copy of its own, and a
    # parked call lets go of what it consumed from the list it shares with the server.
    http = Request(dict(scope))
    refusal = await TransportSecurityMiddleware(security).validate_request(http, is_post=True)
    has_json, has_sse = check_accept_headers(http)
    return refusal is None and has_json and has_sse


class _KeepAlive:
    """A streaming parked call's keep-alive: ``ping()`` from a short task every ``PING_SECONDS``
    until ``stop()``. A class, not a closure re-scheduling itself: such a closure refers to itself,
    a cycle that outlives the call, and a parked call's objects are old by then, freed only by the
    full collections that pause the process (askcards/runtime/collector.py)."""

    __slots__ = ("_loop", "_ping", "_timer", "pinging")

    def __init__(self, loop: asyncio.AbstractEventLoop, ping) -> None:
        self._loop, self._ping = loop, ping
        self.pinging: set[asyncio.Task] = set()
        self._timer = loop.call_later(PING_SECONDS, self._fire)

    def _fire(self) -> None:
        task = self._loop.create_task(self._ping())
        self.pinging.add(task)
        task.add_done_callback(self.pinging.discard)
        self._timer = self._loop.call_later(PING_SECONDS, self._fire)

    def stop(self) -> None:
        self._timer.cancel()  # which lets go of its callback, and so of this


async def _serve_one(server, exchange: _Exchange, parked: Parked, lifespan_state) -> dict[str, Any]:
    """The SDK's ``serve_one``, but letting go of the kernel's cached ``on_request`` at the end:
    the SDK caches that bound method on the kernel, a cycle (see ``_KeepAlive``)."""
    connection = _connection(parked.version)
    runner = ServerRunner(server, connection, lifespan_state)
    try:
        return await runner.on_request(exchange, parked.method, parked.params)
    finally:
        runner.__dict__.pop("on_request", None)
        await aclose_shielded(connection)


async def serve_parked(server, lifespan_state, scope, receive, send, parked: Parked) -> None:
    """Answer one parked request that ``accepted`` let through (see the module's docstring);
    ``receive`` is past the body.

    The handler runs in this request's own task: no task of its own, no ``asyncio.wait`` held for
    every parked call. The client's disconnect (the one ``receive`` pending) cancels it, which
    leaves the ask as it is; the keep-alive's timer sends each ping from a short task. Nothing
    made here refers to itself once the call is over (tests/mcp/test_exchange.py checks): what a
    parked call held is freed as it ends, not at the next full collection."""
    try:
        await _serve_parked(server, lifespan_state, scope, receive, send, parked)
    finally:
        scope.pop(OUTBOUND, None)  # the scope -> emit -> send -> scope cycle


async def _serve_parked(server, lifespan_state, scope, receive, send, parked: Parked) -> None:
    streaming = False

    async def start_stream() -> None:
        nonlocal streaming
        if not streaming:
            streaming = True
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})

    async def emit(message) -> None:
        await start_stream()
        await send({"type": "http.response.body", "body": _frame(message), "more_body": True})

    async def send_ping() -> None:
        with suppress(Exception):  # a client gone meanwhile: its disconnect ends the call
            await start_stream()
            await send({"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True})

    # The scope is this request's own (channels' URL router made it for the route); the emitter
    # itself, no closure of its own kept per parked call.
    scope[OUTBOUND] = emit
    request_id = parked.id
    exchange = _Exchange(Request(scope, receive), request_id, progress_token_from_params(parked.params), emit)
    this = asyncio.current_task()
    assert this is not None
    left = False

    def client_left(_: object) -> None:
        nonlocal left
        left = True
        this.cancel()

    gone = asyncio.ensure_future(receive())  # the client's next message can only be its disconnect
    gone.add_done_callback(client_left)
    keepalive = _KeepAlive(asyncio.get_running_loop(), send_ping)
    pinging = keepalive.pinging
    reply: JSONRPCResponse | JSONRPCError
    try:
        try:
            result = await _serve_one(server, exchange, parked, lifespan_state)
        finally:
            keepalive.stop()
            gone.remove_done_callback(client_left)
            gone.cancel()
    except asyncio.CancelledError:
        for task in pinging:
            task.cancel()
        if left and this.uncancel() == 0:
            return  # a dropped connection: the handler stopped, the ask stays as it is
        raise  # the request itself cancelled (the server closing it)
    except Exception as exc:
        reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=modern_error_data(exc))
    else:
        reply = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
    for task in list(pinging):  # a ping under way goes out before the reply
        await task
    if streaming:
        await send({"type": "http.response.body", "body": _frame(reply), "more_body": False})
    else:
        body = json.dumps(reply.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        status = 200
        if isinstance(reply, JSONRPCError) and parked.version in MODERN_PROTOCOL_VERSIONS:
            status = ERROR_CODE_HTTP_STATUS.get(reply.error.code, 200)  # as the SDK's 2026 exchange answers
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
