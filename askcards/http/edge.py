"""The ASGI edge: what every request passes before any view, and what the routes served without
Django's handler (the long-polls, the platform callbacks) need to behave like Django's.

- Bodies: ``body_limit`` is every route's limit, the one place a body is bounded (the server's own
  reading, ``askcards.http.serverguard``, and the routes below read it). ``read_body`` refuses by
  ``Content-Length`` before reading anything (413; 400 when the header is malformed) and stops
  reading once a streamed body passes the limit (413).
  ``BoundedBody`` applies the same rule, with Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``, in front of
  everything else: Django's ASGI handler reads every body whole before any view or middleware runs
  (spooled to disk past ``FILE_UPLOAD_MAX_MEMORY_SIZE``, never refused), and checks
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` only when a view reads ``request.body``; so an unauthenticated
  client could otherwise make the process read and store any amount of data.
- Host: ``request_for`` validates ``Host`` with Django's own rule (``HttpRequest.get_host``:
  ``ALLOWED_HOSTS``, ``USE_X_FORWARDED_HOST``) and refuses with 400.
- Headers: ``send_response`` adds the headers Django's ``SecurityMiddleware`` and
  ``XFrameOptionsMiddleware`` add, by running those middlewares' own ``process_response``, so the
  bypassing routes follow the same ``SECURE_*`` / ``X_FRAME_OPTIONS`` settings.
- The routes served without Django's handler (the platform callbacks, the long-polls, MCP) start
  with one prologue, ``admit``: Host, their own refusals, the declared length, the key, then the
  body.
- WebSocket origins: ``OriginValidator`` compares an ``Origin``'s scheme, host and port with the
  socket's own origin, ``ASKCARDS_PUBLIC_URL``'s and ``CSRF_TRUSTED_ORIGINS``.

Refusals are JSON in the API's error shape ``{"error": {"code", "message"}}``, logged as one
warning line, never with a traceback.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Callable
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.http import is_same_domain

from askcards.db import in_pool

logger = logging.getLogger(__name__)


class Refused(Exception):
    """A request refused at the edge: ``status`` with a JSON error."""

    def __init__(self, status: int, code: str, message: str, log_as: str = __name__, detail: str = ""):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.log_as, self.detail = log_as, detail or message  # the logger and line for the log

    def response(self) -> HttpResponse:
        return error_response(self.status, self.code, self.message)


def error_response(status: int, code: str, message: str) -> HttpResponse:
    content = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False)
    return HttpResponse(content, status=status, content_type="application/json")


# A platform callback's body: Feishu and DingTalk callbacks are a few KB, and platforms sign what
# they send, so there is nothing to authenticate before reading: the limit is small instead.
MAX_CALLBACK_BYTES = 1024 * 1024


# Routes that take an agent key (``Authorization: Bearer``): a path ending in "/" is a prefix.
KEYED_PATHS: list[str] = ["/api/v1/", "/mcp", "/hooks/"]
# Routes with a smaller limit than DATA_UPLOAD_MAX_MEMORY_SIZE. The platform callbacks are signed
# over their bodies, so nothing can be checked before the body is read: the limit is small instead.
ROUTE_BODY_LIMITS: list[tuple[str, int]] = [("/callbacks/feishu/", MAX_CALLBACK_BYTES),
                                            ("/callbacks/dingtalk/", MAX_CALLBACK_BYTES)]


def default_body_limit() -> int | None:
    """Django's limit for a request body held in memory; ``None`` (an operator's choice) is no limit."""
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def body_limit(path: str) -> int | None:
    """The most body bytes read for a request to ``path`` (None: no limit, an operator's choice):
    the route's own limit, never above Django's."""
    limit = default_body_limit()
    for prefix, route_limit in ROUTE_BODY_LIMITS:
        if path.startswith(prefix):
            return route_limit if limit is None else min(limit, route_limit)
    return limit


def is_keyed(path: str) -> bool:
    """Whether a request to ``path`` carries an agent key (``KEYED_PATHS``)."""
    return any(path == entry or (entry.endswith("/") and path.startswith(entry)) for entry in KEYED_PATHS)


def too_large(limit: int) -> Refused:
    if limit == 0:
        return Refused(413, "request_too_large", "This endpoint takes no request body.")
    return Refused(413, "request_too_large", f"Request bodies here are at most {limit} bytes. Send a smaller request.")


def declared_length(scope) -> int | None:
    """The request's ``Content-Length``, ``None`` when absent (a chunked body); 400 when malformed."""
    values = [value for name, value in scope.get("headers", ()) if name.lower() == b"content-length"]
    if not values:
        return None
    if len(values) > 1 or not values[0].strip().isdigit():
        raise Refused(400, "bad_request", "Malformed Content-Length header: expected one non-negative integer.")
    return int(values[0])


def check_length(scope, limit: int | None) -> None:
    """Refuse by the declared length alone, before anything is read."""
    length = declared_length(scope)
    if limit is not None and length is not None and length > limit:
        raise too_large(limit)


async def read_body(scope, receive, limit: int | None) -> bytes | None:
    """The whole request body, at most ``limit`` bytes; ``None`` when the client went away.

    Raises ``Refused`` (413) before reading when ``Content-Length`` is over the limit, and as soon
    as a streamed body passes it (the rest is never read)."""
    check_length(scope, limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def request_for(scope) -> ASGIRequest:
    """A Django request for ``scope`` (no body) whose ``Host`` Django itself accepts; else
    ``Refused`` (400)."""
    try:
        request = ASGIRequest(scope, BytesIO())
    except UnicodeDecodeError:  # a path or query that is not UTF-8 (daphne refuses those itself)
        raise Refused(400, "bad_request", "The request's path and query must be UTF-8.") from None
    try:
        request.get_host()
    except DisallowedHost as exc:  # logged where Django logs it, without the traceback Django adds
        message = "Invalid Host header: this server does not serve that host."
        raise Refused(400, "bad_request", message, log_as="django.security.DisallowedHost", detail=str(exc)) from None
    return request


def _passthrough(request):  # the middlewares below only post-process; they never call it
    raise AssertionError("not called")


def with_security_headers(request, response: HttpResponse) -> HttpResponse:
    """The headers Django's SecurityMiddleware and XFrameOptionsMiddleware would add (HSTS on
    secure requests, nosniff, Referrer-Policy, Cross-Origin-Opener-Policy, X-Frame-Options), by
    their own code. Built per call: SecurityMiddleware reads its settings when built."""
    response = SecurityMiddleware(_passthrough).process_response(request, response)
    return XFrameOptionsMiddleware(_passthrough).process_response(request, response)


async def send_response(send, response: HttpResponse, request=None) -> None:
    """Send a (non-streaming) Django response, with the security headers when ``request`` is given."""
    if request is not None:
        response = with_security_headers(request, response)
    headers = [(name.encode("latin-1"), str(value).encode("latin-1")) for name, value in response.items()]
    if not response.has_header("Content-Length"):
        headers.append((b"content-length", str(len(response.content)).encode()))
    for cookie in response.cookies.values():
        headers.append((b"set-cookie", cookie.output(header="").strip().encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


async def refuse(scope, send, refused: Refused) -> None:
    """Send a refusal; a warning names what was refused (never the body or credentials)."""
    logging.getLogger(refused.log_as).warning(
        "refused %s %s: %s %s", scope.get("method", "-"), scope.get("path", "-"), refused.status, refused.detail
    )
    try:
        request = ASGIRequest(scope, BytesIO())
    except UnicodeDecodeError:  # refused for that very reason: the headers need only the rest
        request = ASGIRequest({**scope, "path": "/", "raw_path": b"/", "query_string": b""}, BytesIO())
    await send_response(send, refused.response(), request)


@dataclass
class Admitted:
    """A request ``admit`` let through: the edge's request (no body; its Host accepted), the body
    and the caller ``authenticate`` named (None when the route takes no key)."""
    request: ASGIRequest
    body: bytes
    caller: Any = None


async def admit(scope, receive, send, *, check: Callable[[Any, ASGIRequest], HttpResponse | None] | None = None,
                authenticate: Callable[[ASGIRequest], tuple[Any, HttpResponse | None]] | None = None,
                bodiless: bool = False, read: bool = True) -> Admitted | None:
    """The one prologue of the routes served without Django's handler (the platform callbacks, the
    long-polls, MCP), in the order that bounds what a client without a key can make the server hold:

    1. the Host, by Django's rule (``request_for``);
    2. ``check(scope, request)``, the route's own refusals that need no body (a method, an Origin):
       a response to send, or None to go on (or it raises ``Refused``);
    3. the declared ``Content-Length`` against the route's limit (``body_limit``; 0 when the
       request is ``bodiless``, a GET);
    4. ``authenticate(request)``, on the thread pool: the caller, or a response to send instead;
    5. the body, at most that limit (neither measured nor read when ``read`` is false: the request
       goes on with an empty body, for a route that answers it without one).

    Returns None when it answered (a refusal, sent with the security headers and logged as one
    line) or the client went away."""
    limit = 0 if bodiless else body_limit(scope.get("path", ""))
    try:
        request = request_for(scope)
        response = check(scope, request) if check is not None else None
        caller = None
        if response is None:
            if read:
                check_length(scope, limit)
            if authenticate is not None:
                caller, response = await in_pool(authenticate, request)
        if response is not None:
            await send_response(send, response, request)
            return None
        body = await read_body(scope, receive, limit) if read else b""
    except Refused as refused:
        await refuse(scope, send, refused)
        return None
    if body is None:  # the client went away
        return None
    return Admitted(request, body, caller)


class BoundedBody:
    """ASGI middleware for HTTP: no request body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` reaches the
    application, nor over the route's smaller limit (``body_limit``). Over-long ``Content-Length`` →
    413 without reading; a streamed body passing the limit → the application sees the client go
    away (Django's handler then returns without a response or a log line) and the client gets 413.
    Under daphne, ``askcards.http.serverguard`` already stops the server reading at the same limits;
    this keeps the rule for any other ASGI server and for tests."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = body_limit(scope.get("path", ""))
        try:
            check_length(scope, limit)
        except Refused as refused:
            return await refuse(scope, send, refused)
        if limit is None:
            return await self.app(scope, receive, send)
        state = {"read": 0, "over": False, "started": False}

        async def bounded_receive():
            if state["over"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > limit:
                    state["over"] = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message):
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, bounded_receive, tracked_send)
        if state["over"] and not state["started"]:
            await refuse(scope, send, too_large(limit))


# WebSocket origins ---------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_tuple(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL, default ports filled in; None when unparsable."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or _DEFAULT_PORTS[parts.scheme]


def _socket_request(scope) -> ASGIRequest:
    """A Django request describing the socket's handshake, so ``get_host`` and ``is_secure`` apply
    Django's rules (``ALLOWED_HOSTS``, ``USE_X_FORWARDED_HOST``, ``SECURE_PROXY_SSL_HEADER``)."""
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    return ASGIRequest({**scope, "type": "http", "method": "GET", "scheme": scheme}, BytesIO())


def origin_allowed(scope) -> bool:
    """Whether the handshake's ``Origin`` is the socket's own origin (its scheme and an allowed
    ``Host``, as Django's CSRF check builds it), ``ASKCARDS_PUBLIC_URL``'s origin, or one of
    ``CSRF_TRUSTED_ORIGINS`` (``*.`` subdomain patterns as Django reads them). Scheme, host and
    port must all match; a handshake without ``Origin`` (not a browser) is refused."""
    raw = next((value for name, value in scope.get("headers", ()) if name.lower() == b"origin"), None)
    if raw is None:
        return False
    origin = _origin_tuple(raw.decode("latin-1"))
    if origin is None:
        return False
    request = _socket_request(scope)
    try:
        own = _origin_tuple(f"{'https' if request.is_secure() else 'http'}://{request.get_host()}")
    except DisallowedHost:
        own = None
    if origin == own:
        return True
    public_url = getattr(settings, "ASKCARDS_PUBLIC_URL", "")
    trusted = [public_url] if public_url else []
    trusted += list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
    for entry in trusted:
        if "://*." in entry:  # Django's subdomain wildcard: scheme and port still compared
            scheme, _, rest = entry.partition("://")
            pattern = _origin_tuple(f"{scheme}://{rest[2:]}")
            if pattern is not None and (pattern[0], pattern[2]) == (origin[0], origin[2]) and is_same_domain(origin[1], "." + pattern[1]):
                return True
        elif _origin_tuple(entry) == origin:
            return True
    return False


class OriginValidator:
    """WebSocket middleware: only handshakes from an allowed origin (``origin_allowed``) reach the
    application; others are closed before accept (an HTTP 403 to the browser)."""

    def __init__(self, app):
        self.app = app
        self.denier = WebsocketDenier.as_asgi()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            logger.warning("websocket %s refused: origin not allowed", scope.get("path", "-"))
            return await self.denier(scope, receive, send)
        return await self.app(scope, receive, send)


async def no_socket(scope, receive, send):
    """The WebSocket route for every unknown path: closed before accept, one warning line."""
    logger.warning("websocket %s refused: no such socket", scope.get("path", "-"))
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 4404})


class RefusalWithoutTraceback(logging.Filter):
    """For Django's ``django.security.*`` loggers and ``django.request``: a refused request (a bad
    ``Host``, a path that escapes a folder, a body over the limit, an admin page the user may not
    see) is the client's error, answered 4xx by Django. Logged as one warning line, like the
    refusals above, not with a traceback. A server error (5xx) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 400) >= 500:
            return True
        record.exc_info, record.exc_text = None, None
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
