"""A small MCP server (the official Python SDK, Streamable HTTP) on 127.0.0.1 for the CLI to use:

- ``echo(text)``: a plain tool, so the CLI asks permission for ``mcp__<name>__echo``;
- ``pick_database()``: asks the client for input with ``ctx.elicit(...)`` (the CLI's
  ``Elicitation`` hook) and returns what came back (``accept`` + content / ``decline`` / ``cancel``);
- ``approve(tool_name, input, tool_use_id)``: a ``--permission-prompt-tool`` that answers the
  JSON text ``decide(arguments)`` returns (default: allow with the input unchanged).

Every JSON-RPC message the client POSTs is recorded (``messages``), so a test sees the exact
``tools/call`` arguments. Run it in a thread with ``with McpServer(...) as mcp: mcp.url``.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Annotated, Any, Callable

import uvicorn
from pydantic import BaseModel, Field

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve


class DatabaseChoice(BaseModel):
    database: str = Field(description="Which database should we use?", json_schema_extra={"enum": ["PostgreSQL", "SQLite"]})
    reason: str = Field(default="", description="Why")


def ask_database() -> Elicit[DatabaseChoice]:
    """The resolver that elicits a DatabaseChoice (works under both MCP revisions)."""
    return Elicit("Which database should we use?", DatabaseChoice)


def allow_unchanged(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"behavior": "allow", "updatedInput": arguments.get("input", {})}


class McpServer:
    def __init__(self, name: str = "askcards_test", decide: Callable[[dict[str, Any]], dict[str, Any]] = allow_unchanged):
        self.name = name
        self.decide = decide
        self.messages: list[dict[str, Any]] = []  # every JSON-RPC message the client sent
        self.approve_calls: list[dict[str, Any]] = []
        self.elicit_results: list[dict[str, Any]] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _app(self) -> Any:
        mcp = MCPServer(self.name)
        owner = self

        @mcp.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            return f"echo: {text}"

        @mcp.tool(description="Ask the person which database to use (ctx.elicit).")
        async def pick_database_ctx(ctx: Context) -> str:
            result = await ctx.elicit("Which database should we use?", DatabaseChoice)
            return owner._elicited(result)

        @mcp.tool(description="Ask the person which database to use.")
        def pick_database(choice: Annotated[ElicitationResult[DatabaseChoice], Resolve(ask_database)]) -> str:
            return owner._elicited(choice)

        @mcp.tool(description="Decide whether a tool call may run.", structured_output=False)
        def approve(tool_name: str, input: dict[str, Any], tool_use_id: str = "") -> str:
            arguments = {"tool_name": tool_name, "input": input, "tool_use_id": tool_use_id}
            owner.approve_calls.append(arguments)
            return json.dumps(owner.decide(arguments))

        app = mcp.streamable_http_app()

        async def recording(scope: dict[str, Any], receive: Callable, send: Callable) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            chunks: list[bytes] = []
            more = True
            while more:
                message = await receive()
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            try:
                parsed = json.loads(body)
                for item in parsed if isinstance(parsed, list) else [parsed]:
                    owner.messages.append(item)
            except ValueError:
                pass
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await app(scope, replay, send)

        return recording

    def _elicited(self, result: Any) -> str:
        record: dict[str, Any] = {"action": result.action}
        if result.action == "accept":
            record["data"] = result.data.model_dump()
        self.elicit_results.append(record)
        return json.dumps(record)

    def start(self) -> "McpServer":
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the MCP server did not start")
            time.sleep(0.05)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/mcp"

    def config(self) -> dict[str, Any]:
        """``--mcp-config`` JSON naming this server."""
        return {"mcpServers": {self.name: {"type": "http", "url": self.url}}}

    def tool_calls(self) -> list[dict[str, Any]]:
        return [m["params"] for m in self.messages if m.get("method") == "tools/call"]

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(10)
            self._server = None

    def __enter__(self) -> "McpServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
