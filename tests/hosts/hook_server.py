"""A recording HTTP hook server on 127.0.0.1: what a Claude Code ``"type": "http"`` hook POSTs to.

``HookServer(respond)`` records every call (``calls``: path, headers, parsed body, when it came,
when its connection closed) and answers with what ``respond(call)`` returns:

- a ``dict`` (sent as JSON, status 200) or ``None`` (``{}``);
- ``Reply(status, body, delay)``: any status, a body of bytes / str / JSON, sent after ``delay``
  seconds (the server notices the client closing meanwhile);
- ``Hold(release, max_seconds)``: answer nothing until ``release`` (a ``threading.Event``) is set,
  the client closes the connection, or ``max_seconds`` pass; then send ``release_reply`` if the
  connection is still open. ``call.closed_at`` tells when the client gave up.

``permission_decision(...)`` builds the ``PermissionRequest`` answer the CLI obeys.
"""
from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

MAX_CALLS = 200
MAX_BODY = 4 * 1024 * 1024


@dataclass
class HookCall:
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float = field(default_factory=time.monotonic)
    closed_at: float | None = None  # when the client closed the connection before an answer
    answered_at: float | None = None

    @property
    def event(self) -> str | None:
        return self.body.get("hook_event_name") if isinstance(self.body, dict) else None


@dataclass
class Reply:
    status: int = 200
    body: Any = b""  # bytes, str, or JSON-able
    delay: float = 0.0
    content_type: str = "application/json"


@dataclass
class Hold:
    release: threading.Event = field(default_factory=threading.Event)
    max_seconds: float = 60.0
    release_reply: Any = None  # what to send once released (dict / Reply / None = {})


Answer = Union[dict, Reply, Hold, None]


def permission_decision(behavior: str, *, message: str | None = None, updated_input: dict | None = None,
                        updated_permissions: list | None = None, interrupt: bool | None = None) -> dict[str, Any]:
    """The answer to a ``PermissionRequest`` hook: ``behavior`` "allow" or "deny"."""
    decision: dict[str, Any] = {"behavior": behavior}
    if message is not None:
        decision["message"] = message
    if updated_input is not None:
        decision["updatedInput"] = updated_input
    if updated_permissions is not None:
        decision["updatedPermissions"] = updated_permissions
    if interrupt is not None:
        decision["interrupt"] = interrupt
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}


def _closed_by_peer(conn: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class HookServer:
    def __init__(self, respond: Callable[[HookCall], Answer] | None = None):
        self.respond = respond or (lambda call: None)
        self.calls: list[HookCall] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.arrived = threading.Condition(self._lock)

    def start(self) -> "HookServer":
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(min(length, MAX_BODY)) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                call = HookCall(self.path, dict(self.headers.items()), body)
                with hooks.arrived:
                    hooks.calls.append(call)
                    too_many = len(hooks.calls) > MAX_CALLS
                    hooks.arrived.notify_all()
                if too_many:
                    self._send(Reply(503, {"error": "hook server: call limit"}))
                    return
                answer = hooks.respond(call)
                if isinstance(answer, Hold):
                    deadline = time.monotonic() + answer.max_seconds
                    while not answer.release.is_set() and time.monotonic() < deadline:
                        if _closed_by_peer(self.connection):
                            call.closed_at = time.monotonic()
                            self.close_connection = True
                            return
                        time.sleep(0.05)
                    answer = answer.release_reply
                if isinstance(answer, Reply) and answer.delay:
                    deadline = time.monotonic() + answer.delay
                    while time.monotonic() < deadline:
                        if _closed_by_peer(self.connection):
                            call.closed_at = time.monotonic()
                            self.close_connection = True
                            return
                        time.sleep(0.05)
                if _closed_by_peer(self.connection):
                    call.closed_at = time.monotonic()
                    self.close_connection = True
                    return
                self._send(answer if isinstance(answer, Reply) else Reply(200, answer if answer is not None else {}))
                call.answered_at = time.monotonic()

            def _send(self, reply: Reply) -> None:
                body = reply.body
                if isinstance(body, str):
                    data = body.encode()
                elif isinstance(body, bytes):
                    data = body
                else:
                    data = json.dumps(body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "HookServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def url(self, path: str = "/hooks/claude-code") -> str:
        assert self._server is not None, "start() the hook server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def events(self, name: str) -> list[HookCall]:
        with self._lock:
            return [c for c in self.calls if c.event == name]

    def wait_for(self, predicate: Callable[[HookCall], bool], timeout: float = 30) -> HookCall:
        """The first call (already here or still to come) that ``predicate`` accepts."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                for call in self.calls:
                    if predicate(call):
                        return call
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no matching hook call within {timeout} s; calls: {[c.event for c in self.calls]}")
                self.arrived.wait(left)
