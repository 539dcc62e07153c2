"""A fake OpenAI Responses API on 127.0.0.1 that the real Codex CLI talks to instead of a model.

Each ``POST …/responses`` of the agent (a request that offers the model tools) takes the next
scripted turn and streams it back as Server-Sent Events, the way the Responses API does
(``response.created``, ``response.output_item.done`` per item, ``response.completed``). Every such
request body is kept (``.requests``, headers in ``.headers``) so a test can read what Codex sent the
model, e.g. the tool output of a command a hook denied. Requests without tools are Codex's side
requests (the interactive CLI asks for a thread title in parallel with the first turn): they get a
short title and are kept in ``.side_requests`` without using up the script. Once the script is
used up every further request gets a final message, and ``max_requests`` bounds how many are
answered at all, so a Codex that loops cannot keep a test running.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LEFTOVER_TEXT = "fake model: no scripted turn is left"
SIDE_TEXT = "Scripted test task"


@dataclass(frozen=True)
class Turn:
    """One scripted model reply: the output items of a single response."""

    items: tuple[dict[str, Any], ...]


def shell_call(command: str, call_id: str = "call_shell_1", *, escalated: bool = False, justification: str = "") -> Turn:
    """The model asks Codex to run ``command`` with its ``exec_command`` tool (Codex 0.171's shell
    tool, whose arguments are ``{"cmd": …}``). ``escalated`` asks to run it outside the sandbox,
    which needs approval under ``approval_policy = "on-request"``."""
    arguments: dict[str, Any] = {"cmd": command}
    if escalated:
        arguments["sandbox_permissions"] = "require_escalated"
    if justification:
        arguments["justification"] = justification
    return Turn(({
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": "exec_command",
        "arguments": json.dumps(arguments),
    },))


def message(text: str) -> Turn:
    """The model answers with a final assistant message, which ends Codex's turn."""
    return Turn(({
        "type": "message",
        "role": "assistant",
        "id": "msg_final",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    },))


@dataclass
class FakeResponsesAPI:
    """``with FakeResponsesAPI([shell_call("…"), message("done")]) as api:`` serves at ``api.base_url``."""

    turns: list[Turn]
    max_requests: int = 20
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    side_requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake Responses API is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "FakeResponsesAPI":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
                pass

            def do_GET(self) -> None:  # Codex may look up models; it has none here.
                api._record_path("GET " + self.path)
                self._answer(404, b'{"error": {"message": "not found"}}', "application/json")

            def do_POST(self) -> None:
                api._record_path("POST " + self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/responses"):
                    self._answer(404, b'{"error": {"message": "not found"}}', "application/json")
                    return
                turn = api._next_turn(json.loads(raw), dict(self.headers))
                if turn is None:
                    self._answer(429, b'{"error": {"message": "fake model: request limit reached"}}', "application/json")
                    return
                self._answer(200, _sse(turn, api._answered()), "text/event-stream")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-responses-api", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _record_path(self, line: str) -> None:
        with self._lock:
            self.paths.append(line)

    def _next_turn(self, body: dict[str, Any], headers: dict[str, str]) -> Turn | None:
        with self._lock:
            if len(self.requests) + len(self.side_requests) >= self.max_requests:
                return None
            if not body.get("tools"):
                self.side_requests.append(body)
                return message(SIDE_TEXT)
            self.requests.append(body)
            self.headers.append(headers)
            index = len(self.requests) - 1
            return self.turns[index] if index < len(self.turns) else message(LEFTOVER_TEXT)

    def _answered(self) -> int:
        with self._lock:
            return len(self.requests) + len(self.side_requests)

    def function_outputs(self, call_id: str) -> list[str]:
        """The outputs Codex sent back to the model for tool call ``call_id``, in request order."""
        found = []
        for body in self.requests:
            for item in body.get("input", []):
                if item.get("type") == "function_call_output" and item.get("call_id") == call_id:
                    output = item.get("output")
                    found.append(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
        return found


def _sse(turn: Turn, number: int) -> bytes:
    response_id = f"resp_{number}"
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": response_id}}]
    for index, item in enumerate(turn.items):
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({
        "type": "response.completed",
        "response": {
            "id": response_id,
            "usage": {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            },
        },
    })
    return b"".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events)
