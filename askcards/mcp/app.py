"""``/mcp``: the ASGI app in front of the SDK's Streamable HTTP transport.

Served by ``project.asgi`` ahead of Django's handler (like the long-polls: a parked call must not
hold a thread). Before the SDK sees a request, the edge rules of every askcards route apply:

- ``Host`` by Django's rule (``ALLOWED_HOSTS``); a browser's ``Origin`` must be the site's own,
  ``ASKCARDS_PUBLIC_URL``'s or a ``CSRF_TRUSTED_ORIGINS`` one (the panel socket's rule). The SDK's
  own transport security is configured from the same settings where it can express them.
- The body: refused by ``Content-Length`` over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` before anything
  is read, then the agent key is checked, and only then is the body read (bounded) and parsed
  with askcards' JSON limits (size, nesting depth, no NaN) before the SDK parses it again.
- ``Authorization: Bearer <agent key>``; otherwise 401 with ``WWW-Authenticate: Bearer``.
- ``GET`` is 405 (no standalone SSE stream without sessions); a body that is JSON but not one
  object is a JSON-RPC Invalid Request (-32600).
- What a client declared at ``initialize`` on the handshake revisions (``askcards.mcp.apps``): an
  ``initialize`` that declares MCP Apps, or form elicitation on a ``host=ask`` URL, is answered
  with an ``Mcp-Session-Id`` recording it (signed, nothing kept here); a later request carrying
  it has it checked and the result put in the scope for the handlers. A session id askcards did
  not issue for this agent is 404, which tells a client to initialize again; without one, a
  request is served as before.
- A JSON-RPC response (the client answering the host surface's ``elicitation/create``,
  ``askcards.mcp.host``) is taken here, by any process: 202 once its signed id checks out, 400
  when it answers nothing askcards asked this key's client.

The SDK runs stateless (a fresh transport per request, no session of its own), so no request
depends on what another request left in this process's memory.
"""
from __future__ import annotations

import asyncio
import json
import logging
import weakref
from io import BytesIO
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from askcards.http import edge, jsonlimits
from askcards.operators import metrics
from askcards.db import in_pool

from . import apps, host
from .caller import Unauthorized, agent_for
from .exchange import accepted, parked_request, serve_parked
from .context import CLIENT_SCOPE
from .server import build_server

logger = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
SESSION_HEADER = b"mcp-session-id"


def transport_security() -> TransportSecuritySettings:
    """The SDK's Host/Origin check from ``ALLOWED_HOSTS``, ``ASKCARDS_PUBLIC_URL`` and
    ``CSRF_TRUSTED_ORIGINS``. Django's patterns it cannot express (``*``, ``.example.com``, a
    trusted origin's ``https://*.example.com``) turn it off; Django's Host check and askcards'
    Origin check, which run first on every request, still apply them."""
    hosts = list(settings.ALLOWED_HOSTS)
    trusted = [getattr(settings, "ASKCARDS_PUBLIC_URL", ""), *getattr(settings, "CSRF_TRUSTED_ORIGINS", [])]
    if any(host == "*" or host.startswith(".") for host in hosts) or any("*" in url for url in trusted):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    allowed_hosts = [pattern for host in hosts for pattern in (host, f"{host}:*")]
    origins = [f"{scheme}://{pattern}" for scheme in ("http", "https") for pattern in allowed_hosts]
    for url in trusted:
        parts = urlsplit(url)
        if parts.scheme and parts.netloc:
            origins.append(f"{parts.scheme}://{parts.netloc}")
    return TransportSecuritySettings(allowed_hosts=allowed_hosts, allowed_origins=origins)


def _header(scope, name: bytes) -> str | None:
    value = next((v for k, v in scope.get("headers", ()) if k.lower() == name), None)
    return value.decode("latin-1") if value is not None else None


def _host_ask(scope) -> bool:
    """Whether the URL opts in to the host surface (``host=ask``); its other parameters are
    checked on every request by ``caller_for``."""
    try:
        return ("host", "ask") in parse_qsl(scope.get("query_string", b"").decode("utf-8"))
    except UnicodeDecodeError:
        return False


def _unauthorized(message: str) -> HttpResponse:
    response = edge.error_response(401, "invalid_key", message)
    response["WWW-Authenticate"] = 'Bearer realm="askcards"'
    return response


def _jsonrpc_error(status: int, code: int, message: str) -> HttpResponse:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return HttpResponse(json.dumps(body), status=status, content_type="application/json")


def _origin_checked(scope, request) -> None:
    """A browser page may call /mcp only from an allowed origin (DNS rebinding)."""
    origin = _header(scope, b"origin")
    if origin is not None and not edge.origin_allowed(scope):
        raise edge.Refused(403, "forbidden", f"Origin {origin[:100]!r} may not call this endpoint.")


def _caller(request) -> tuple[Any, HttpResponse | None]:
    """The agent the key names, or the 401 to send."""
    try:
        return agent_for(_header(request.scope, b"authorization")), None
    except Unauthorized as exc:
        logger.warning("refused %s %s: 401 %s", request.scope["method"], request.scope["path"], exc)
        return None, _unauthorized(str(exc))


def _no_stream() -> HttpResponse:
    """GET: the stateless transport has nothing to send on a standalone SSE stream (no session
    outlives a POST), so the spec's 405 says so at once; the SDK would hold an idle stream open
    (its headers only with the first keep-alive, 15 s later) for as long as the client waits."""
    message = "Method Not Allowed: this server is stateless and offers no SSE stream; POST JSON-RPC messages"
    response = _jsonrpc_error(405, INVALID_REQUEST, message)
    response["Allow"] = "POST"
    return response


class McpApp:
    """ASGI app for ``/mcp``: edge checks, then the SDK's stateless Streamable HTTP manager.

    The manager needs a running task group (an ASGI lifespan, which daphne does not send), so it is
    started on the first request, once per event loop, and runs as long as that loop."""

    def __init__(self):
        self.server = build_server()
        self._managers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        # A GET (a server-initiated stream) is answered once its key is checked; its body never read.
        admitted = await edge.admit(scope, receive, send, check=_origin_checked, authenticate=_caller,
                                    read=scope["method"] != "GET")
        if admitted is None:
            return
        request, body, agent = admitted.request, admitted.body, admitted.caller
        del admitted  # a parked call lets go of the request and the body below: nothing else may hold them
        limit = edge.body_limit(scope["path"])
        if scope["method"] == "GET":
            await edge.send_response(send, _no_stream(), request)
            return
        if body:
            try:
                message = jsonlimits.load(body, what="MCP message", max_bytes=limit)
            except jsonlimits.JSONRefused as exc:
                await edge.send_response(send, _jsonrpc_error(400, PARSE_ERROR, str(exc)), request)
                return
            if not isinstance(message, dict):
                # The SDK answers a JSON array or scalar with -32602 and a pydantic dump of four
                # validation errors; JSON-RPC calls it an Invalid Request (and MCP has no batches).
                text = f"Invalid Request: the body must be one JSON-RPC message object, got {jsonlimits.kind(message)}"
                await edge.send_response(send, _jsonrpc_error(400, INVALID_REQUEST, text), request)
                return
        issued = None  # the Mcp-Session-Id an initialize is answered with (what its client declared)
        extra: dict = {"askcards.agent": agent}
        if body and message.get("method") == "initialize":
            params = message.get("params")
            capabilities = params.get("capabilities") if isinstance(params, dict) else None
            declared = apps.Declared(apps=apps.client_declares_apps(capabilities),
                                     forms=apps.client_declares_forms(capabilities) and _host_ask(scope))
            if declared.apps or declared.forms:
                issued = apps.session_token(agent.pk, declared)
        elif _header(scope, SESSION_HEADER) is not None and _header(scope, b"mcp-protocol-version") not in MODERN_PROTOCOL_VERSIONS:
            found = apps.session_declares(_header(scope, SESSION_HEADER) or "", agent_id=agent.pk)
            if found is None:
                text = "Session not found: this Mcp-Session-Id was not issued here for this key; send initialize again"
                await edge.send_response(send, _jsonrpc_error(404, INVALID_REQUEST, text), request)
                return
            extra[CLIENT_SCOPE] = found
        if body and host.is_response(message):
            rejected = await in_pool(host.take_response, agent, message)
            if rejected is None:
                await edge.send_response(send, HttpResponse(status=202), request)
            else:
                refusal = _jsonrpc_error(rejected.status, rejected.code, rejected.message)
                await edge.send_response(send, refusal, request)
            return
        if issued is not None:
            send = _with_session(send, issued)
        manager = await self._manager(limit)
        scope.update(extra)  # the request's own scope (channels' URL router copied it for this route)
        parked = parked_request(message, scope) if body else None
        if parked is not None and await accepted(manager.security_settings, scope):
            # A parked call holds only what it needs while it waits: not the body, its parse or
            # the Django request (the response's security headers are made from the scope).
            del body, message, request
            _let_go_of_headers(scope)
            with metrics.parked("mcp"):
                await serve_parked(self.server, {}, scope, receive, _secured(send, scope), parked)
            return
        await manager.handle_request(scope, _replay(body, receive), _secured(send, scope))

    async def _manager(self, limit: int | None) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        started = self._managers.get(loop)
        if started is None:
            manager = StreamableHTTPSessionManager(
                app=self.server,
                stateless=True,
                security_settings=transport_security(),
                max_request_body_size=limit or DEFAULT_MAX_REQUEST_BODY_SIZE,
            )
            ready: asyncio.Future = loop.create_future()

            async def run():
                async with manager.run():
                    ready.set_result(manager)
                    await loop.create_future()  # until the loop ends

            started = (ready, loop.create_task(run()))
            self._managers[loop] = started
        return await asyncio.shield(started[0])


# What a parked call no longer reads of its request's headers once it is served: the key was
# checked, the body read, the envelope classified. The rest (Host, Origin, X-Forwarded-*: what the
# response's security headers are made from) stays.
CONSUMED_HEADERS = frozenset({
    b"authorization", b"content-type", b"content-length", b"accept", b"accept-encoding", b"user-agent",
    b"mcp-protocol-version", b"mcp-session-id", b"mcp-method", b"mcp-name",
})


def _let_go_of_headers(scope) -> None:
    """Drop the consumed headers from the request's header list, in place: the server's scope and
    the routers' copies of it share that list, and a parked call keeps it for minutes."""
    headers = scope.get("headers")
    if isinstance(headers, list):
        headers[:] = [(name, value) for name, value in headers if name.lower() not in CONSUMED_HEADERS]


def _replay(body: bytes, receive):
    """A ``receive`` that gives the body already read, then the client's own messages
    (disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _with_session(send, session_id: str):
    """``send`` naming the session in a successful ``initialize`` response's headers."""

    async def named(message):
        if message["type"] == "http.response.start" and message.get("status") == 200:
            message = {**message, "headers": [*message.get("headers", ()), (SESSION_HEADER, session_id.encode("ascii"))]}
        await send(message)

    return named


def _secured(send, scope):
    """``send`` adding the security headers Django's middleware would add to the response (from
    a Django request made for them then: ``edge.request_for`` accepted this scope already)."""

    async def secured(message):
        if message["type"] == "http.response.start":
            extra = edge.with_security_headers(ASGIRequest(scope, BytesIO()), HttpResponse())
            present = {name.lower() for name, _ in message.get("headers", ())}
            headers = list(message.get("headers", ()))
            for name, value in extra.items():
                if name.lower() != "content-type" and name.lower().encode() not in present:
                    headers.append((name.lower().encode("latin-1"), str(value).encode("latin-1")))
            message = {**message, "headers": headers}
        await send(message)

    return secured

