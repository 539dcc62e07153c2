"""The host as a surface on 2025-11-25 (``host=ask``): the official SDK client, declaring form
elicitation with an ``elicitation_callback``, against a real ``manage.py serve``.

A blocking ``tools/call`` sends ``elicitation/create`` on its own response stream; the client's
answer is a POST of its own (its JSON-RPC id, signed by the server, names the ask) and races
alice's panel: the first answer wins, the other side closes saying where it was answered. A
decline or a dismissal is the person's answer (``declined`` / ``dismissed``). A task that needs the
host's input is ``input_required``, and its ``tasks/result`` carries the form (with the
``related-task`` meta). A client gone while its user fills the form ends ``caller_gone``.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx2
import mcp_types as types
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.mcp import support
from tests.mcp.test_mcp_serve import (  # noqa: F401  (served: the module's server, a fixture)
    RELATED_TASK,
    Served,
    answers,
    panel,
    questions,
    rest_ask,
    run,
    send,
    served,
)

HOST = "&host=ask"
OnForm = Callable[[Any, types.ElicitRequestFormParams], Awaitable[types.ElicitResult]]


def hosted(name: str) -> str:
    return f"session={name}&platform=web&web_user=alice{HOST}"


class Responses:
    """The client's response POSTs (its answers to the server's requests) and their HTTP status."""

    def __init__(self):
        self.seen: list[tuple[int, dict]] = []
        self.urls: list[httpx2.URL] = []  # where each was posted
        self.arrived = asyncio.Event()

    async def hook(self, response: httpx2.Response) -> None:
        request = response.request
        if request.method != "POST" or not request.content:
            return
        body = json.loads(request.content)
        if "method" not in body and ("result" in body or "error" in body):
            self.seen.append((response.status_code, body))
            self.urls.append(request.url)
            self.arrived.set()

    async def first(self) -> tuple[int, dict]:
        async with asyncio.timeout(support.TIMEOUT):
            await self.arrived.wait()
        return self.seen[0]


class ResponsesTo(httpx2.AsyncBaseTransport):
    """Sends the client's response POSTs to another server (``other``): the response reaches a
    process that does not hold the call."""

    def __init__(self, other: str):
        self.other = httpx2.URL(other)
        self.transport = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.content:
            body = json.loads(request.content)
            if "method" not in body and "result" in body:
                request.url = request.url.copy_with(port=self.other.port)
                request.headers["host"] = f"{self.other.host}:{self.other.port}"
        return await self.transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self.transport.aclose()


@contextlib.asynccontextmanager
async def host_client(base: str, key: str, query: str, on_form: OnForm, *,
                      responses_to: str | None = None) -> AsyncIterator[tuple[Client, Responses]]:
    """A 2025-11-25 client that shows forms (``on_form`` is its user), recording its responses."""
    seen = Responses()
    transport = ResponsesTo(responses_to) if responses_to else None
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, transport=transport,
                              timeout=httpx2.Timeout(support.TIMEOUT, read=120), event_hooks={"response": [seen.hook]})
    async with Client(streamable_http_client(f"{base}/mcp?{query}", http_client=http), mode="legacy",
                      elicitation_callback=on_form) as mcp:
        assert mcp.protocol_version == "2025-11-25"
        yield mcp, seen


def accept(content: dict) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


def test_the_hosts_answer_first_wins_and_the_panel_says_where(served: Served):
    qs = questions("host first")
    forms: list[types.ElicitRequestFormParams] = []

    async def scenario():
        async with panel(served.base, served.cookie) as alice:
            async def on_form(ctx, params):
                forms.append(params)
                await alice.shown(qs)  # on the panel too, as always
                return accept({"q1": "SQLite", "q1_other": " 先试试 "})

            async with host_client(served.base, served.key, hosted("host-first"), on_form) as (mcp, seen):
                result = await asyncio.wait_for(mcp.call_tool("ask_user_questions", {"questions": qs}), support.TIMEOUT)
                posted = await seen.first()
            ask_id = result.structured_content["ask"]["id"]
            withdrawn = await alice.withdrawn(ask_id)
        return result, forms, posted, withdrawn, await rest_ask(served, ask_id)

    result, forms, posted, withdrawn, ask = run(scenario())
    (form,) = forms
    assert form.mode == "form" and form.requested_schema["required"] == ["q1"]
    assert [o["const"] for o in form.requested_schema["properties"]["q1"]["oneOf"]] == ["PostgreSQL", "SQLite"]
    assert posted[0] == 202
    assert result.is_error is False
    assert result.structured_content["status"] == "answered"
    assert json.loads(result.content[0].text)["answers"][0]["customInput"] == "先试试"
    # The panel closes the form naming the host: its page reads 「已在 MCP 客户端回答。」.
    assert withdrawn == {"type": "ask_user_questions_cancelled", "requestId": ask["id"], "reason": "submitted",
                         "surface": "host"}
    assert ask["respondents"][0]["surface"] == "host" and ask["status"] == "answered"


def test_the_panels_answer_first_wins_and_the_late_host_answer_changes_nothing(served: Served):
    qs = questions("panel first")

    async def scenario():
        asked, released = asyncio.Event(), asyncio.Event()
        async with panel(served.base, served.cookie) as alice:
            async def on_form(ctx, params):
                asked.set()
                await released.wait()  # the person at the host is slower than alice
                return accept({"q1": "SQLite"})

            async with host_client(served.base, served.key, hosted("panel-first"), on_form) as (mcp, seen):
                call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": qs}))
                shown = await alice.shown(qs)
                await asyncio.wait_for(asked.wait(), support.TIMEOUT)  # the form is out at the host
                assert (await alice.answer(shown, "PostgreSQL"))["ok"] is True
                result = await asyncio.wait_for(call, support.TIMEOUT)
                released.set()
                posted = await seen.first()
        return result, posted, await rest_ask(served, shown["requestId"])

    result, posted, ask = run(scenario())
    assert result.is_error is False
    assert json.loads(result.content[0].text) == answers(qs, "PostgreSQL")
    assert posted[0] == 202  # taken, and it changed nothing
    assert ask["status"] == "answered" and ask["respondents"][0]["surface"] == "web"
    assert ask["result"]["answers"][0]["selectedLabels"] == ["PostgreSQL"]


@pytest.mark.parametrize("action,reason,text", [("decline", "declined", "用户拒绝回答"),
                                                ("cancel", "dismissed", "用户关闭了提问，未作答")])
def test_declining_or_dismissing_the_form_is_the_persons_answer(served: Served, action, reason, text):
    qs = questions(f"host {action}")

    async def on_form(ctx, params):
        return types.ElicitResult(action=action)

    async def scenario():
        async with panel(served.base, served.cookie) as alice:
            async with host_client(served.base, served.key, hosted(f"host-{action}"), on_form) as (mcp, _):
                result = await asyncio.wait_for(mcp.call_tool("ask_user_questions", {"questions": qs}), support.TIMEOUT)
            ask_id = result.structured_content["ask"]["id"]
            withdrawn = await alice.withdrawn(ask_id)
        return result, withdrawn, await rest_ask(served, ask_id)

    result, withdrawn, ask = run(scenario())
    assert result.is_error is True and text in result.content[0].text
    assert result.structured_content["status"] == "cancelled"
    assert (ask["status"], ask["reason"]) == ("cancelled", reason)
    assert withdrawn["reason"] == reason  # the panel reads 「已在 MCP 客户端拒绝回答。」 / 「…关闭，未作答。」


def test_content_that_does_not_answer_the_form_is_asked_again(served: Served):
    """The first response names no option (a client that did not check the schema): it changes
    nothing, and the parked call puts the form again; the second answers."""
    qs = questions("host again")
    replies = [accept({"q1": "MongoDB"}), accept({"q1": "SQLite"})]
    asked: list[Any] = []

    async def on_form(ctx, params):
        asked.append(params)
        return replies[len(asked) - 1]

    async def scenario():
        async with panel(served.base, served.cookie):
            async with host_client(served.base, served.key, hosted("host-again"), on_form) as (mcp, seen):
                result = await asyncio.wait_for(mcp.call_tool("ask_user_questions", {"questions": qs}), support.TIMEOUT)
        return result, [status for status, _ in seen.seen]

    result, statuses = run(scenario())
    assert len(asked) == 2 and statuses == [202, 202]
    assert json.loads(result.content[0].text) == answers(qs, "SQLite")


def test_without_host_ask_the_client_is_asked_nothing(served: Served):
    qs = questions("host off")
    asked: list[Any] = []

    async def on_form(ctx, params):
        asked.append(params)
        return accept({"q1": "SQLite"})

    async def scenario():
        async with panel(served.base, served.cookie) as alice:
            query = hosted("host-off").replace(HOST, "")
            async with host_client(served.base, served.key, query, on_form) as (mcp, _):
                call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": qs}))
                shown = await alice.shown(qs)
                await alice.answer(shown, "PostgreSQL")
                return await asyncio.wait_for(call, support.TIMEOUT)

    result = run(scenario())
    assert asked == [] and json.loads(result.content[0].text) == answers(qs, "PostgreSQL")


def test_a_task_needing_the_hosts_input_asks_on_its_tasks_result(served: Served):
    """2025-11-25 tasks: ``tasks/get`` says ``input_required``; ``tasks/result`` carries the form
    (naming the task in its ``related-task`` meta) and returns the answer it brought."""
    qs = questions("host task")
    metas: list[Any] = []

    async def on_form(ctx, params):
        metas.append(dict(params.meta) if params.meta else None)
        return accept({"q1": "SQLite"})

    async def scenario():
        async with panel(served.base, served.cookie), host_client(served.base, served.key, hosted("host-task"),
                                                                  on_form) as (mcp, _):
            params = {"name": "ask_user_questions", "arguments": {"questions": qs}, "task": {}}
            task_id = (await send(mcp, "tools/call", params))["task"]["taskId"]
            status = (await send(mcp, "tasks/get", {"taskId": task_id}))["status"]
            result = await asyncio.wait_for(send(mcp, "tasks/result", {"taskId": task_id}), support.TIMEOUT)
            after = (await send(mcp, "tasks/get", {"taskId": task_id}))["status"]
        return task_id, status, result, after

    task_id, status, result, after = run(scenario())
    assert status == "input_required"
    assert metas == [{RELATED_TASK: {"taskId": task_id}}]
    assert result["isError"] is False and json.loads(result["content"][0]["text"]) == answers(qs, "SQLite")
    assert after == "completed"


def test_a_client_gone_while_its_user_fills_the_form_ends_caller_gone(tmp_path):
    """The blocking call holds its lease while the form is out: the client drops its stream
    mid-form and never comes back, so once the grace passes the ask is withdrawn (caller_gone)."""
    qs = questions("host gone")

    async def scenario(base: str, key: str, cookie: str) -> tuple[dict, dict]:
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        url = f"{base}/mcp?{hosted('host-gone')}"
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "gone", "version": "1"}}}
        async with panel(base, cookie) as alice, httpx2.AsyncClient(timeout=support.TIMEOUT) as http:
            started = await http.post(url, json=init, headers=headers)
            session = started.headers["mcp-session-id"]  # it recorded the form capability
            headers |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "ask_user_questions", "arguments": {"questions": qs}}}
            form = None
            async with http.stream("POST", url, json=call, headers=headers) as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data:") and '"elicitation/create"' in line:
                        form = json.loads(line[5:])
                        break  # the client drops the stream, and with it the call
            shown = await alice.shown(qs)
            withdrawn = await alice.withdrawn(shown["requestId"])
        return form, withdrawn

    with support.seeded(tmp_path, ASKCARDS_MCP_CALLER_GRACE_SECONDS="2") as (base, seed):
        form, withdrawn = run(scenario(base, seed["key"], support.login_cookie(base)))
        ask = requests.get(f"{base}/api/v1/asks/{withdrawn['requestId']}", timeout=support.TIMEOUT,
                           headers={"Authorization": f"Bearer {seed['key']}"}).json()
    assert form is not None and form["params"]["mode"] == "form"
    assert withdrawn["reason"] == "caller_gone"
    assert (ask["status"], ask["reason"]) == ("cancelled", "caller_gone")
