"""The server's own edge: what daphne (on Twisted) does with a connection before the application
sees a request, and the limits askcards sets there.

Daphne reads a request's headers and its whole body before it calls the application, and Twisted
times a connection out only after 60 s without a byte. Left alone, a client trickling a byte every
few seconds holds a connection (a file descriptor) for ever, and any client can make the server
store a 2.5 MB body (a temporary file past 100 KB) before a view checks who sent it.
``guard_server()`` gives daphne the connection and request classes below; ``project/asgi.py``
calls it, and ``manage.py serve``, ``runserver`` and the ``daphne`` command all import that module
before they serve (daphne builds each connection through its ``HTTPFactory.protocol`` and each
request from the module attribute ``daphne.http_protocol.WebRequest``).

- Time: a connection must start a request within ``ASKCARDS_HEADER_TIMEOUT`` of opening, or within
  ``ASKCARDS_KEEPALIVE_TIMEOUT`` of its previous response (an idle connection is then closed
  quietly; the keep-alive bound outlasts the idle pools of common clients and proxies, which must
  be the side that closes an idle connection: a server closing one as the client reuses it fails
  that client's request, a POST for good), finish the headers
  within ``ASKCARDS_HEADER_TIMEOUT`` of the request's first byte, and the body within
  ``ASKCARDS_BODY_TIMEOUT`` of the headers; otherwise it gets a 408 and is closed. Once a request
  is handed to the application (a parked long-poll, an MCP stream, an upgraded WebSocket) these
  timers stop: those end by their own rules.
- Count: a peer address has at most ``ASKCARDS_PEER_CONNECTIONS`` connections that are not inside
  a dispatched request (opening, reading headers or a body, idle between requests); a connection
  past that gets a 503 and is closed at once. ``0`` turns the cap off.
- Bodies: a body over its route's limit (``edge.body_limit``: ``DATA_UPLOAD_MAX_MEMORY_SIZE``; the
  platform callbacks' own 1 MB) is answered 413, by ``Content-Length`` before a byte of it is read,
  else as soon as a chunked body passes the limit.
- Keys: on the keyed routes (``edge.KEYED_PATHS``) a body over ``ASKCARDS_PRE_AUTH_BODY_BYTES`` (or a
  chunked body once past that) is not read further until the agent key has been checked, in the
  thread pool (``selectors.agent_for_authorization``, the API's own rule); a bad key gets the API's
  401 and the connection is closed. Smaller bodies are read as before and checked by the
  application, so they cost no extra query.
- Reads: until a request is known not to need a key (another route), its key was checked good,
  or the application answers it, the connection reads ``KEY_READ_BYTES`` at a time instead of
  Twisted's 64 KB, so what it has read but not yet passed on when reading is held is small; then
  it reads 64 KB at a time again (a large body, once its key is good, is not read 4 KB at a time).
  What an unauthenticated connection can make the server hold on a keyed route is therefore the
  request line and headers (Twisted: at most ``http.HTTPChannel.totalHeadersSize``, 16 KB, a line
  at most ``MAX_LENGTH``, 16 KB, at most 500 headers; past that 400 and closed) and a body of at
  most ``ASKCARDS_PRE_AUTH_BODY_BYTES`` plus one read of ``KEY_READ_BYTES`` — each for at most
  its timeout — and, while the application answers a request, what the client sent ahead: at
  most ``KEY_READ_BYTES`` plus one read (``_optimisticEagerReadSize``; Twisted's is 16 KB).

A refused connection is answered, then read for at most ``LINGER_SECONDS`` (what arrives is
dropped) so that a client still sending its body can read the answer, then closed. Refusals and
cuts are logged by ``RefusalLog``: the first of a quiet spell as one warning line, the rest of
each ``LOG_WINDOW_SECONDS`` as one summary line; never a traceback, never a header's value.
HTTP/2 (daphne's TLS endpoints with Twisted's http2 extra, not installed here) is not guarded.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from io import BytesIO
from typing import Any, Callable
from urllib.parse import unquote

from daphne import http_protocol
from django.conf import settings
from twisted.web import http
from twisted.web.http_headers import Headers

from askcards import selectors
from askcards.db import in_pool
from askcards.errors import Unauthenticated
from askcards.http import edge

logger = logging.getLogger(__name__)

# How much a connection reads at a time while its request may still be refused for its key (module
# docstring, "Reads"): a request's headers and a small body still take one or two reads.
KEY_READ_BYTES = 4096
LINGER_SECONDS = 2.0  # how long a refused connection is drained so its client can read the answer
ABORT_SECONDS = 5  # a cut connection that has not closed by then (its client reads nothing) is aborted
LOG_WINDOW_SECONDS = 10.0

_ORIGINAL_REQUEST = http_protocol.WebRequest
# Connections per peer address not inside a dispatched request (the reactor thread's only).
_waiting: Counter[str] = Counter()


def request_path(channel: Any) -> str:
    """The path (no query) of the request a channel is reading, decoded as daphne decodes it."""
    raw = getattr(channel, "_path", None) or b""
    return unquote(raw.split(b"?", 1)[0].decode("latin-1"))


def request_label(channel: Any) -> str:
    method = (getattr(channel, "_command", None) or b"-").decode("latin-1", "replace")
    return f"{method} {request_path(channel)[:200] or '-'}"


def key_refusal(authorization: bytes | None) -> Unauthenticated | None:
    """Why the ``Authorization`` header does not name an active agent; None when it does."""
    try:
        selectors.agent_for_authorization(authorization)
    except Unauthenticated as exc:
        return exc
    return None


def answer(status: int, code: str, message: str, *extra: tuple[str, str]) -> bytes:
    """A whole HTTP/1.1 response in the API's JSON error shape, closing the connection."""
    body = edge.error_response(status, code, message).content
    reason = http.RESPONSES.get(status, b"Error").decode("latin-1")
    lines = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
             "connection: close", "x-content-type-options: nosniff", *(f"{name}: {value}" for name, value in extra)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class RefusalLog:
    """Warnings for refused and cut connections without a flood: the first one after a quiet spell
    is logged as it happens; the rest of that window are counted and logged as one summary line
    when it ends (and that line starts the next window)."""

    MAX_PEERS = 1000  # distinct addresses remembered per window

    def __init__(self, window: float = LOG_WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic,
                 call_later: Callable[..., Any] | None = None):
        self.window, self._clock, self._call_later = window, clock, call_later
        self._quiet_until = 0.0
        self._pending: Counter[str] = Counter()
        self._peers: set[str] = set()
        self._flush_call: Any = None

    def note(self, kind: str, line: str, peer: str | None = None) -> None:
        now = self._clock()
        if now >= self._quiet_until and not self._pending:
            logger.warning("%s", line)
            self._quiet_until = now + self.window
            return
        self._pending[kind] += 1
        if peer is not None and len(self._peers) < self.MAX_PEERS:
            self._peers.add(peer)
        if self._flush_call is None:
            call_later = self._call_later or _reactor_call_later
            self._flush_call = call_later(max(0.0, self._quiet_until - now), self.flush)

    def flush(self) -> None:
        self._flush_call = None
        if not self._pending:
            return
        kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(self._pending.items()))
        peers = f"{len(self._peers)}{'+' if len(self._peers) >= self.MAX_PEERS else ''}"
        logger.warning("%d more connections refused or cut in the last %.0f s (%s) from %s address(es)",
                       sum(self._pending.values()), self.window, kinds, peers)
        self._pending.clear()
        self._peers.clear()
        self._quiet_until = self._clock() + self.window


def _reactor_call_later(delay: float, fn: Callable[[], None]) -> Any:
    from twisted.internet import reactor as installed

    reactor: Any = installed  # the asyncio reactor daphne installed
    return reactor.callLater(delay, fn)


refusals = RefusalLog()


class GuardedChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 connection with the time limits and the per-peer count (module docstring).

    ``_phase``: "idle" (no byte of a request yet), "headers", "body", "dispatched" (the request is
    the application's), "refused" (answered; drained until it closes), "closed"."""

    abortTimeout = ABORT_SECONDS
    # What a client sends ahead while its request is with the application (Twisted: 16 KB) is
    # buffered up to this before reading pauses: that request's key may not be checked yet.
    _optimisticEagerReadSize = KEY_READ_BYTES
    _phase = "idle"
    _deadline: Any = None
    _peer: str | None = None
    _counted = False
    _reading_held = False
    _drained = 0
    _full_read: int | None = None  # the transport's own read size (None: a transport without one, TLS)

    # -- the connection's life
    def connectionMade(self):
        self.timeOut = None  # Twisted's own idle timeout (60 s without a byte): the phases' deadlines replace it
        super().connectionMade()
        self._peer = getattr(self.transport.getPeer(), "host", None)  # None on a UNIX socket: not capped
        cap = settings.ASKCARDS_PEER_CONNECTIONS
        if self._peer is not None and cap and _waiting[self._peer] >= cap:
            refusals.note("503 over the per-peer cap", f"refused a connection from {self._peer}: 503, it already "
                          f"has {cap} connections not in a request (ASKCARDS_PEER_CONNECTIONS)", self._peer)
            self._phase = "closed"
            self.transport.write(answer(503, "too_many_connections", "Too many connections from your address that "
                                        "are not in a request. Try again shortly.", ("retry-after", "1")))
            self.loseConnection()
            return
        self._count()
        self._full_read = getattr(self.transport, "bufferSize", None)
        self.small_reads()
        self._expect("idle", settings.ASKCARDS_HEADER_TIMEOUT)

    def dataReceived(self, data):
        if self._phase == "refused":  # answered already: drop what the client still sends
            self._drained += len(data)
            if self._drained > (edge.default_body_limit() or 2_621_440):
                self.transport.abortConnection()
            return
        if self._phase == "closed":
            return
        if self._phase == "idle":
            self._expect("headers", settings.ASKCARDS_HEADER_TIMEOUT)
        super().dataReceived(data)

    def allHeadersReceived(self):
        self._expect("body", settings.ASKCARDS_BODY_TIMEOUT)
        super().allHeadersReceived()

    def allContentReceived(self):
        if self._phase in ("headers", "body"):
            self._cancel_deadline()
            self._phase = "dispatched"
            self._uncount()
        super().allContentReceived()

    def requestDone(self, request):
        if self.persistent and self._phase == "dispatched":
            # Set before Twisted replays pipelined data, which may start the next request at once.
            self._count()
            self.small_reads()  # the next request carries its own key
            self._expect("idle", settings.ASKCARDS_KEEPALIVE_TIMEOUT)
        super().requestDone(request)

    def connectionLost(self, reason):
        self._cancel_deadline()
        self._phase = "closed"
        self._uncount()
        super().connectionLost(reason)

    # -- how much one read takes (Twisted's TCP and UNIX transports read ``bufferSize`` bytes)
    def small_reads(self) -> None:
        transport: Any = self.transport
        if self._full_read is not None and transport is not None:
            transport.bufferSize = min(self._full_read, KEY_READ_BYTES)

    def full_reads(self) -> None:
        transport: Any = self.transport
        if self._full_read is not None and transport is not None:
            transport.bufferSize = self._full_read

    # -- reading held while a key is checked
    def hold_reading(self) -> None:
        self._reading_held = True
        self._networkProducer.pauseProducing()

    def release_reading(self) -> None:
        self._reading_held = False
        if sum(map(len, self._dataBuffer)) <= self._optimisticEagerReadSize:  # else Twisted's own back-pressure
            self._networkProducer.resumeProducing()

    def resumeProducing(self):
        super().resumeProducing()  # the transport drained its writes; reading stays held if it was
        if self._reading_held:
            self._networkProducer.pauseProducing()

    def _send100Continue(self):
        request = self.requests[-1] if self.requests else None
        if getattr(request, "refused", False):
            return
        if getattr(request, "key_pending", False):
            request.continue_waiting = True  # sent once the key is good; a bad key gets its 401 instead
            return
        super()._send100Continue()

    # -- limits
    def refuse(self, response: bytes) -> None:
        """Answer ``response`` and close: stop reading the request, drop what still arrives for at
        most LINGER_SECONDS (and one body limit's worth) so the client can read the answer."""
        if self._phase in ("refused", "closed"):
            return
        self._cancel_deadline()
        self._phase = "refused"  # still counted for its peer while it drains
        self._reading_held = False
        self.full_reads()  # what is drained is dropped at once
        transport: Any = self.transport
        transport.write(response)
        self._networkProducer.resumeProducing()
        transport.loseWriteConnection()
        self._abortingCall = self.callLater(LINGER_SECONDS, self.forceAbortClient)

    def _timed_out(self) -> None:
        self._deadline = None
        phase, peer = self._phase, self._peer or "-"
        if phase == "headers":
            timeout = settings.ASKCARDS_HEADER_TIMEOUT
            refusals.note("408 headers too slow", f"cut a connection from {peer}: 408, the request's headers were "
                          f"not complete within {timeout} s (ASKCARDS_HEADER_TIMEOUT)", peer)
            message = f"The request's headers were not complete within {timeout} s."
        elif phase == "body":
            timeout = settings.ASKCARDS_BODY_TIMEOUT
            refusals.note("408 body too slow", f"cut {request_label(self)} from {peer}: 408, the body was not "
                          f"complete within {timeout} s of the headers (ASKCARDS_BODY_TIMEOUT)", peer)
            message = f"The request's body was not complete within {timeout} s of its headers."
        elif phase == "idle":  # an idle keep-alive connection, or one that never sent a byte: closed quietly
            self._phase = "closed"
            self.loseConnection()
            return
        else:
            return
        self._phase = "closed"
        transport: Any = self.transport
        transport.write(answer(408, "request_timeout", message))
        self.loseConnection()
        self._abortingCall = self.callLater(self.abortTimeout, self.forceAbortClient)

    def _expect(self, phase: str, seconds: float) -> None:
        self._cancel_deadline()
        self._phase = phase
        self._deadline = self.callLater(seconds, self._timed_out)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _count(self) -> None:
        if self._peer is not None and not self._counted:
            _waiting[self._peer] += 1
            self._counted = True

    def _uncount(self) -> None:
        if self._counted and self._peer is not None:
            _waiting[self._peer] -= 1
            if _waiting[self._peer] <= 0:
                del _waiting[self._peer]
            self._counted = False


SERVER_READ_HEADERS = (b"host", b"connection", b"x-forwarded-for", b"user-agent", b"referer")


class GuardedRequest(_ORIGINAL_REQUEST):  # type: ignore[misc, valid-type]
    """Daphne's request, refusing a body over its route's limit and holding a keyed route's large
    body until the key is checked (module docstring)."""

    guarded = True
    refused = False
    key_pending = False
    continue_waiting = False
    _received = 0
    _limit: int | None = None
    _length: int | None = None
    _key_above: int | None = None  # a keyed body: its key is checked once it passes this many bytes
    _key_passed = False
    _process_waiting = False

    def gotLength(self, length):
        path = request_path(self.channel)
        self._limit, self._length = edge.body_limit(path), length
        if self._limit is not None and length is not None and length > self._limit:
            self.content = BytesIO()
            self._refuse_too_large()
            return
        keyed = edge.is_keyed(path)
        if not keyed:
            self.channel.full_reads()
        threshold = settings.ASKCARDS_PRE_AUTH_BODY_BYTES
        if keyed and (length is None or length > threshold):
            self._key_above = threshold
            self.content = BytesIO()  # the file Twisted would make (a temporary file past 100 KB) once the key is good
            if length is not None:
                self._check_key()
            return
        super().gotLength(length)

    def handleContentChunk(self, data):
        if self.refused:
            return
        self._received += len(data)
        if self._limit is not None and self._received > self._limit:
            self._refuse_too_large()
            return
        super().handleContentChunk(data)
        if self._key_above is not None and not (self.key_pending or self._key_passed) and self._received > self._key_above:
            self._check_key()

    def handle_reply(self, message):
        if message.get("type") == "http.response.start" and self.channel is not None:
            self.channel.full_reads()  # the application has judged the request (its key included)
        return super().handle_reply(message)

    def process(self):
        if self.refused:  # the rest of a refused body may still arrive: it is dropped
            return None
        if self.key_pending:
            self._process_waiting = True
            return None
        processed = super().process()
        if processed.called and getattr(self, "application_queue", None) is not None:
            # The body is in the application's queue now: no second copy of it is kept for as
            # long as the application runs (a parked long-poll or MCP call: minutes).
            read, self.content = self.content, BytesIO()
            read.close()
            # Nor a second copy of its headers: the application has its own list of them. Kept is
            # what Twisted itself may still read (Host, Connection, X-Forwarded-For and what its
            # access log names).
            kept = Headers()
            for name in SERVER_READ_HEADERS:
                values = self.requestHeaders.getRawHeaders(name)
                if values is not None:
                    kept.setRawHeaders(name, values)
            self.requestHeaders = kept
        return processed

    # -- the key, checked off the reactor thread
    def _check_key(self) -> None:
        self.key_pending = True
        self.channel.hold_reading()
        authorization = (self.requestHeaders.getRawHeaders(b"authorization") or [None])[0]
        future = asyncio.ensure_future(in_pool(key_refusal, authorization))
        future.add_done_callback(self._key_checked)

    def _key_checked(self, future: asyncio.Future) -> None:
        self.key_pending = False
        if future.cancelled():
            return
        try:
            refusal = future.result()
        except Exception as exc:  # the database, say: the application checks the key anyway
            logger.warning("the server could not check an agent key before the body (%s); the application will",
                           type(exc).__name__)
            refusal = None
        if self.refused or self.channel is None:  # refused meanwhile, or the client went away
            return
        if refusal is not None:
            self._refuse(answer(401, refusal.code, refusal.message, ("www-authenticate", "Bearer")),
                         "401 bad key", f"401 {refusal.code}, before the body")
            return
        self._key_passed = True
        held = self.content.getvalue()
        super().gotLength(self._length)  # the content file Twisted would have made
        self.content.write(held)
        channel = self.channel
        channel.full_reads()
        if self.continue_waiting:
            channel._send100Continue()
        channel.release_reading()
        if self._process_waiting:
            self._process_waiting = False
            self.process()

    # -- refusing
    def _refuse_too_large(self) -> None:
        limit = self._limit or 0
        self._refuse(answer(413, "request_too_large", edge.too_large(limit).message), "413 body too large",
                     f"413 body over {limit} bytes")

    def _refuse(self, response: bytes, kind: str, what: str) -> None:
        self.refused = True
        self.content = BytesIO()  # what was read of the body (one read's worth, at most) is let go now
        channel = self.channel
        if channel is None:
            return
        peer = getattr(channel, "_peer", None)
        refusals.note(kind, f"refused {request_label(channel)} from {peer or '-'}: {what} (by the server, before "
                      "the application)", peer)
        channel.refuse(response)


def _guarded_protocol(factory: Any) -> Any:
    return http._GenericHTTPChannelProtocol(GuardedChannel())


def guard_server() -> None:
    """Install the classes above into daphne (idempotent)."""
    if getattr(http_protocol.HTTPFactory, "askcards_guarded", False):
        return
    http_protocol.WebRequest = GuardedRequest
    http_protocol.HTTPFactory.protocol = _guarded_protocol
    http_protocol.HTTPFactory.askcards_guarded = True
