"""MCP Apps (``io.modelcontextprotocol/ui``): the ``ui://`` form of an ``ask_user_questions`` call,
its resource and its app-only tools — served only to a client that declares the extension, on
each protocol era — and the app's answer racing the other surfaces. Through the real ASGI app.

The app in a real browser, under a host built on the ext-apps bridge: tests/e2e/test_mcp_app_browser.py;
its attacks (another agent's ask, a forged session id): tests/security/test_mcp_apps.py.
"""
from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from askcards import services
from askcards.models import Ask, AskEvent
from tests.conftest import QUESTIONS, answer_for
from tests.security import mcp_wire as wire
from tests.security.edge_client import call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

UI = "io.modelcontextprotocol/ui"
MIME = "text/html;profile=mcp-app"
URI = "ui://askcards/ask.html"
DECLARES = {"extensions": {UI: {"mimeTypes": [MIME]}}}
CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
APP_TOOLS = {"askcards_app_ask", "askcards_app_answer"}


class Client:
    """One MCP client of one era, declaring MCP Apps or not (``capabilities``)."""

    def __init__(self, key: str, era: str, capabilities: dict, query: str = wire.WEB):
        self.key, self.era, self.capabilities, self.query = key, era, capabilities, query
        self.session_id: str | None = None

    async def connect(self) -> "Client":
        if self.era == wire.LEGACY:
            answer = await wire.rpc(self.key, "initialize", {
                "protocolVersion": wire.LEGACY, "capabilities": self.capabilities,
                "clientInfo": {"name": "test-host", "version": "1"}}, query=self.query)
            assert answer.status == 200, answer.exchange.body[:300]
            self.session_id = answer.headers.get("mcp-session-id")
        return self

    async def rpc(self, method: str, params: dict | None = None) -> wire.Answer:
        params = dict(params or {})
        extra = []
        if self.era == wire.MODERN:
            params["_meta"] = {**params.get("_meta", {}), CAPABILITIES: self.capabilities}
        elif self.session_id is not None:
            extra.append(("mcp-session-id", self.session_id))
        message, headers = wire.request(method, params, era=self.era)
        if self.era == wire.MODERN and method == "resources/read":  # the revision routes reads by their URI
            headers.append(("mcp-name", params["uri"]))
        return await wire.post(self.key, message, query=self.query, version=self.era, extra=[*headers, *extra])

    async def tools(self) -> dict[str, dict]:
        return {tool["name"]: tool for tool in (await self.rpc("tools/list")).result["tools"]}

    async def call(self, name: str, arguments: dict) -> dict:
        return (await self.rpc("tools/call", {"name": name, "arguments": arguments})).result


ERAS = [wire.LEGACY, wire.MODERN]


@pytest.fixture
def key(agent_and_key, present_session):
    return agent_and_key[1]


def _ask(ask_id: str) -> Ask:
    return Ask.objects.get(pk=ask_id)


def _pending(agent, session) -> str:
    outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS})
    assert outcome.status == "pending"
    return outcome.ask.id


# ------------------------------------------------------------------------------- gating


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_that_shows_apps_gets_the_form_resource_and_app_tools(era, key):
    client = await Client(key, era, DECLARES).connect()
    if era == wire.LEGACY:
        assert client.session_id, "the initialize that declared MCP Apps is answered with an Mcp-Session-Id"
    listed = await client.tools()
    ask_tool = listed["ask_user_questions"]
    assert ask_tool["_meta"]["ui"] == {"resourceUri": URI}
    assert ask_tool["_meta"]["ui/resourceUri"] == URI  # the flat key older hosts read
    for name in APP_TOOLS:
        assert listed[name]["_meta"]["ui"] == {"resourceUri": URI, "visibility": ["app"]}  # hidden from the model
        if era == wire.LEGACY:  # 2026-07-28 tools carry no execution (tasks are an extension there)
            assert listed[name]["execution"]["taskSupport"] == "forbidden"

    resources = (await client.rpc("resources/list")).result["resources"]
    assert [(r["uri"], r["mimeType"]) for r in resources] == [(URI, MIME)]
    contents = (await client.rpc("resources/read", {"uri": URI})).result["contents"]
    assert len(contents) == 1 and contents[0]["uri"] == URI and contents[0]["mimeType"] == MIME
    html = contents[0]["text"]
    assert html.startswith("<!doctype html>") and 'lang="zh-CN"' in html
    # The panel's form and texts, and the app's protocol, inlined: nothing to fetch.
    for text in ("其他（可选）", "已在其他地方作答。", "ui/initialize", "ui/notifications/initialized",
                 "ui/notifications/tool-input", "askcards_app_answer", "请至少选择一项或填写其他"):
        assert text in html
    assert "<script src" not in html and "<link" not in html


NOT_DECLARED = [
    {},
    {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    {"extensions": {UI: {}}},  # the extension without the MCP App MIME type: not an Apps host
    {"extensions": {UI: {"mimeTypes": ["text/html"]}}},
]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("capabilities", NOT_DECLARED)
async def test_other_clients_see_no_form_no_resource_and_no_app_tool(era, capabilities, key, agent, present_session):
    client = await Client(key, era, capabilities).connect()
    assert client.session_id is None  # stateless as ever
    listed = await client.tools()
    assert set(listed) == {"ask_user_questions"} and "_meta" not in listed["ask_user_questions"]
    assert (await client.rpc("resources/list")).result["resources"] == []
    read = await client.rpc("resources/read", {"uri": URI})
    assert read.error["code"] == -32602 and URI in read.error["message"]
    ask_id = await database_sync_to_async(_pending)(agent, present_session)
    refused = await client.rpc("tools/call", {"name": "askcards_app_answer", "arguments": {"askId": ask_id, "answers": answer_for()}})
    assert refused.error is not None and "askcards_app_answer" in refused.error["message"]
    assert (await database_sync_to_async(_ask)(ask_id)).status == "pending"


# ----------------------------------------------------------------------- the app's tools


@pytest.mark.parametrize("era", ERAS)
async def test_the_app_finds_the_calls_ask_and_its_answer_wins(era, key, agent, present_session, recording_surface):
    # A client that also declares tasks: the app's calls are still answered at once, not as tasks.
    declares = {"extensions": {**DECLARES["extensions"], "io.modelcontextprotocol/tasks": {}}}
    client = await Client(key, era, declares).connect()
    assert (await client.call("askcards_app_ask", {"questions": QUESTIONS}))["structuredContent"] == {"ask": None}
    ask_id = await database_sync_to_async(_pending)(agent, present_session)

    found = (await client.call("askcards_app_ask", {"questions": QUESTIONS}))["structuredContent"]["ask"]
    assert found["requestId"] == ask_id and found["status"] == "pending" and found["questions"] == QUESTIONS
    assert found["agent"] == "agent-a" and found["session"] == "网页会话：web/alice" and found["deadline"]

    answered = await client.call("askcards_app_answer", {"askId": ask_id, "answers": answer_for(labels=("SQLite",))})
    assert answered["isError"] is False
    assert answered["structuredContent"] == {"accepted": True, "status": "answered", "reason": "submitted"}
    ask = await database_sync_to_async(_ask)(ask_id)
    assert ask.result["answers"][0]["selectedLabels"] == ["SQLite"]
    closed = await database_sync_to_async(lambda: AskEvent.objects.get(ask_id=ask_id, kind=AskEvent.Kind.CLOSED))()
    assert closed.surface == "host_app"
    assert ("withdraw", ask_id, "answered") in recording_surface.calls  # the panel and cards close
    # Found again once it has ended (a view shown again): it says how.
    again = (await client.call("askcards_app_ask", {"questions": QUESTIONS}))["structuredContent"]["ask"]
    assert (again["requestId"], again["status"], again["reason"]) == (ask_id, "answered", "submitted")


async def test_answered_on_the_panel_first_the_apps_answer_changes_nothing(key, agent, present_session):
    client = await Client(key, wire.LEGACY, DECLARES).connect()
    ask_id = await database_sync_to_async(_pending)(agent, present_session)
    panel = await database_sync_to_async(services.ask_answer)(ask_id=ask_id, answers=answer_for(), surface="web")
    assert panel.accepted
    late = await client.call("askcards_app_answer", {"askId": ask_id, "answers": answer_for(labels=("SQLite",))})
    assert late["isError"] is False
    assert late["structuredContent"] == {"accepted": False, "status": "answered", "reason": "submitted", "error": "not_pending"}
    ask = await database_sync_to_async(_ask)(ask_id)
    assert ask.result["answers"][0]["selectedLabels"] == ["PostgreSQL"]


BAD_INPUT = [
    ("askcards_app_ask", {}, "questions must be the tool call's questions"),
    ("askcards_app_ask", {"questions": "Which database?"}, "questions must be the tool call's questions"),
    ("askcards_app_ask", {"questions": [{"header": "x"}]}, "questions must be the tool call's questions"),
    ("askcards_app_ask", {"questions": [{"question": "q"}] * 5}, "questions must be the tool call's questions"),
    ("askcards_app_answer", {"answers": []}, "askId must be the id of the ask the app shows"),
    ("askcards_app_answer", {"askId": "q_../../etc", "answers": []}, "askId must be the id of the ask the app shows"),
    ("askcards_app_answer", {"askId": "q_" + "0" * 31, "answers": []}, "askId must be the id of the ask the app shows"),
    ("askcards_app_answer", {"askId": "ASK", "answers": "PostgreSQL"}, "invalid: expected 1 answers, one per question"),
    ("askcards_app_answer", {"askId": "ASK", "answers": answer_for(labels=("Oracle",))}, "invalid: answer 0: unknown option 'Oracle'"),
    ("askcards_app_answer", {"askId": "ASK", "answers": answer_for(question="Another?")}, "invalid: answer 0 is for another question"),
]


@pytest.mark.parametrize("name, arguments, message", BAD_INPUT)
async def test_bad_input_to_an_app_tool_is_a_tool_error_that_says_what_is_wrong(name, arguments, message, key, agent,
                                                                              present_session):
    client = await Client(key, wire.MODERN, DECLARES).connect()
    ask_id = await database_sync_to_async(_pending)(agent, present_session)
    arguments = {k: ask_id if v == "ASK" else v for k, v in arguments.items()}
    result = await client.call(name, arguments)
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(message), result["content"][0]["text"]
    assert result["structuredContent"] == {"error": result["content"][0]["text"]}
    assert (await database_sync_to_async(_ask)(ask_id)).status == "pending"  # nothing changed


async def test_the_apps_session_holds_nothing_to_end_so_delete_is_405(key):
    client = await Client(key, wire.LEGACY, DECLARES).connect()
    headers = wire.headers(key, extra=[("mcp-session-id", client.session_id)])
    ended = await call("DELETE", f"/mcp?{wire.WEB}", headers=headers, body=b"", host="testserver", scheme="http", timeout=10)
    assert ended.status == 405 and b"Session termination not supported" in ended.body
    assert (await client.tools())["ask_user_questions"]["_meta"]["ui"] == {"resourceUri": URI}  # still recorded
