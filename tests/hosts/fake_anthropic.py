"""A fake Anthropic Messages API on 127.0.0.1 that a real Claude Code CLI talks to instead of the
network (``ANTHROPIC_BASE_URL``), scripted per test.

The script is a list of turns, each what the "model" answers once: ``ToolUse(name, input)`` (or a
list of them, called in one turn) or ``Text(text)``. Which turn a request gets is read from the
conversation it carries (the number of assistant messages in it), so a retried request gets the
same turn again and a request after a tool call gets the next one. Past the end of the script the
model answers ``Text(FakeAnthropic.final_text)``.

Claude Code 2.1.332 calls nothing but ``POST /v1/messages?beta=true`` (streaming, always with
``tools``), in -p and interactive mode alike. A request without ``tools`` (a side request a later
version may send: titles, summaries, a quota probe) is answered ``side_text`` without using up the
script. ``POST /v1/messages/count_tokens`` answers a rough count; anything else answers 404 in the
API's error shape. Every request is recorded (``requests``), so a test can assert what the model
received: ``tool_results()`` gives the ``tool_result`` blocks the CLI sent back, by tool_use id
(scripted calls get ids ``toolu_fake_<turn>_<n>``), ``tool_result_text(id)`` the text of one.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Union

MAX_REQUESTS = 300  # per server: a CLI stuck in a loop gets 529 (overloaded) past this
MAX_BODY = 16 * 1024 * 1024
SOCKET_TIMEOUT = 30  # seconds a connection may sit idle


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str | None = None  # default: toolu_fake_<turn>_<n>


@dataclass(frozen=True)
class Text:
    text: str


Turn = Union[ToolUse, Text, list]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it is not JSON
    at: float = field(default_factory=time.time)

    @property
    def is_main(self) -> bool:
        """A request of the agent loop (it offers tools), not one of the CLI's side requests."""
        return self.path.split("?")[0] == "/v1/messages" and isinstance(self.body, dict) and bool(self.body.get("tools"))


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _blocks(turn: Turn, index: int) -> list[dict[str, Any]]:
    items = turn if isinstance(turn, list) else [turn]
    blocks: list[dict[str, Any]] = []
    for n, item in enumerate(items):
        if isinstance(item, Text):
            blocks.append({"type": "text", "text": item.text})
        elif isinstance(item, ToolUse):
            blocks.append({"type": "tool_use", "id": item.id or f"toolu_fake_{index}_{n}", "name": item.name, "input": item.input})
        else:
            raise TypeError(f"a turn is ToolUse, Text or a list of them, not {item!r}")
    return blocks


def _stream(blocks: list[dict[str, Any]], model: str, message_id: str) -> bytes:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    out = [_sse("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            out.append(_sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            out.append(_sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
            out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 20}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def _whole(blocks: list[dict[str, Any]], model: str, message_id: str) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 20}}


def text_of(content: Any) -> str:
    """The text of a message or tool_result ``content`` (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


class FakeAnthropic:
    final_text = "Done."
    side_text = "OK"

    def __init__(self, turns: Iterable[Turn] = (), *, final_text: str | None = None):
        self.turns: list[Turn] = list(turns)
        if final_text is not None:
            self.final_text = final_text
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "FakeAnthropic":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = SOCKET_TIMEOUT

            def log_message(self, *args: Any) -> None:
                pass

            def _read(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(min(length, MAX_BODY)) if length else b""
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    return raw.decode("utf-8", "replace")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("request-id", "req_fake")
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, data: Any) -> None:
                self._send(status, json.dumps(data).encode(), "application/json")

            def _handle(self) -> None:
                body = self._read() if self.command in ("POST", "PUT", "PATCH") else None
                record = Recorded(self.command, self.path, dict(self.headers.items()), body)
                with fake._lock:
                    fake.requests.append(record)
                    count = len(fake.requests)
                if count > MAX_REQUESTS:
                    self._json(529, {"type": "error", "error": {"type": "overloaded_error", "message": "fake API: request limit"}})
                    return
                fake._answer(self, record)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeAnthropic":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake API first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- answering ---------------------------------------------------------------------------------
    def turn_for(self, body: dict[str, Any]) -> tuple[int, Turn]:
        index = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if index < len(self.turns):
            return index, self.turns[index]
        return index, Text(self.final_text)

    def _answer(self, handler: Any, record: Recorded) -> None:
        path = record.path.split("?")[0]
        if path == "/v1/messages/count_tokens" and handler.command == "POST":
            size = len(json.dumps(record.body or {}))
            handler._json(200, {"input_tokens": max(1, size // 4)})
            return
        if path != "/v1/messages" or handler.command != "POST" or not isinstance(record.body, dict):
            handler._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"fake API: no {handler.command} {path}"}})
            return
        body = record.body
        model = body.get("model", "claude-fake")
        if record.is_main:
            index, turn = self.turn_for(body)
            blocks = _blocks(turn, index)
        else:
            index, blocks = -1, [{"type": "text", "text": self.side_text}]
        message_id = f"msg_fake_{index}_{len(self.requests)}"
        if body.get("stream"):
            handler._send(200, _stream(blocks, model, message_id), "text/event-stream")
        else:
            handler._json(200, _whole(blocks, model, message_id))

    # -- what the model received -------------------------------------------------------------------
    def main_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.is_main]

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """Every ``tool_result`` block the CLI sent back, by tool_use id (the last copy of each)."""
        results: dict[str, dict[str, Any]] = {}
        for record in self.main_requests():
            for message in record.body.get("messages", []):
                if message.get("role") != "user" or not isinstance(message.get("content"), list):
                    continue
                for block in message["content"]:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        results[block["tool_use_id"]] = block
        return results

    def tool_result_text(self, tool_use_id: str) -> str:
        return text_of(self.tool_results()[tool_use_id].get("content"))
