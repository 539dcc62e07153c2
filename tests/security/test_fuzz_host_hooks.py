"""The agent hosts' hooks (``/hooks/claude-code``, ``/hooks/codex``) under hypothesis fuzzing
(bounded, a fixed seed): the events Claude Code 2.1.332 and Codex really send
(tests/hosts/events, tests/hosts/codex/events), mutated where it hurts — a value of another type
(a number where a list belongs, an object where a text does), a key dropped or added, a hostile
value (NUL, lone surrogates, deep nesting, huge strings) — and the event and tool names swapped
among the ones askcards reads.

Every reply is below 500: a 4xx in the API's error shape, or the host's own reply. Nobody answers
in these tests — each prompt that is asked is ended at once by an operator, the person's own
cancel, the task's cancel, the host going away or its deadline — so no reply may ever allow a
tool or accept an elicitation, and no ask is left open. The two bodies the audit found crashing
(a ``MultiEdit`` whose ``edits`` is a number, an ``addDirectories`` suggestion whose
``directories`` is one) are explicit examples, so every run tries them.
"""
from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from hypothesis import example, given, seed, settings
from hypothesis import strategies as st

from askcards import services
from askcards.models import Ask
from askcards.surfaces.feishu.surface import FeishuSurface
from project.asgi import application
from tests.conftest import grant_bot
from tests.surfaces import RecordingSurface

from .strategies import FUZZ, Text, hostile_values, json_values, render

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS_DIR = Path(__file__).resolve().parents[1] / "hosts" / "events"
CODEX_EVENTS_DIR = EVENTS_DIR.parent / "codex" / "events"
CLAUDE_EVENTS = {path.stem: json.loads(path.read_text()) for path in sorted(EVENTS_DIR.glob("*.json"))
                 if path.stem != "headers"}
CODEX_EVENTS = {path.stem: json.loads(path.read_text()) for path in sorted(CODEX_EVENTS_DIR.glob("*.json"))
                if ".decision." not in path.name}
EVENTS = {**{f"claude/{name}": event for name, event in CLAUDE_EVENTS.items()},
          **{f"codex/{name}": event for name, event in CODEX_EVENTS.items()}}

FEISHU_APP = "cli_hookfuzz"
URLS = {
    "claude-web": "/hooks/claude-code?session=web%2Falice&platform=web&web_user=alice&timeout=30",
    "codex-web": "/hooks/codex?session=web%2Falice&platform=web&web_user=alice&timeout=30",
    "claude-feishu": f"/hooks/claude-code?session=feishu-{FEISHU_APP}-private-ou_alice&bot={FEISHU_APP}&timeout=30",
    "claude-dingtalk": "/hooks/claude-code?session=dingtalk%2Fdm%2Fstaff_a&platform=dingtalk&chat_type=p2p"
                       "&user_id=staff_a&timeout=30",
}
EVENT_NAMES = ["PermissionRequest", "Elicitation", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop",
               "Notification", "ElicitationResult"]
TOOL_NAMES = ["Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "WebFetch", "WebSearch", "AskUserQuestion",
              "mcp__deploy__run", "Read"]
# How a prompt that is asked ends here: never by an answer.
ENDINGS = ["by_operator", "by_respondent", "session_cancelled", "host_gone", "timeout"]
REPLY_SECONDS = 15  # a prompt is ended the moment it shows: a reply that takes longer is parked on nothing


@pytest.fixture
def hooks(agent_and_key, settings, monkeypatch):
    """alice's panel (the recording surface) for every session, a Feishu bot granted to the agent,
    and every surface ending each ask the moment it shows it (``ending`` says how)."""
    agent, key = agent_and_key
    settings.ASKCARDS_SURFACES = ["tests.surfaces.RecordingSurface", "askcards.surfaces.feishu.surface.FeishuSurface"]
    bot = services.bot_add(platform="feishu", app_id=FEISHU_APP, app_secret="secret", base_url="http://127.0.0.1:9")
    grant_bot(agent, bot)
    monkeypatch.setattr(RecordingSurface, "reachable", lambda self, session, tool: session.platform != "feishu")
    ending = {"reason": "by_operator"}

    def end_at_once(self, ask):
        ask = Ask.objects.select_related("session", "agent").get(pk=ask.pk)
        if ending["reason"] == "timeout":
            assert services.ask_expire(ask=ask, now=ask.deadline)
        else:
            assert services.ask_cancel(ask=ask, reason=ending["reason"], actor="operator:fuzz")

    monkeypatch.setattr(RecordingSurface, "show", end_at_once)
    monkeypatch.setattr(FeishuSurface, "show", end_at_once)
    return key, ending


def _containers(value: Any, path: tuple = ()) -> list[tuple]:
    """Every object and list inside ``value`` (itself included), by path."""
    found = [path]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(item, (dict, list)):
            found += _containers(item, (*path, key))
    return found


def _at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


@st.composite
def mutated_events(draw) -> Any:
    """A captured event with one to three mutations."""
    event = copy.deepcopy(EVENTS[draw(st.sampled_from(sorted(EVENTS)))])
    if draw(st.booleans()):
        event["hook_event_name"] = draw(st.sampled_from(EVENT_NAMES))
    if draw(st.booleans()):
        event["tool_name"] = draw(st.sampled_from(TOOL_NAMES))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if not isinstance(event, (dict, list)):
            break
        path = draw(st.sampled_from(_containers(event)))
        container = _at(event, path)
        keys = list(container) if isinstance(container, dict) else list(range(len(container)))
        value = draw(json_values | hostile_values)
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "add" or not keys:
            if isinstance(container, dict):
                container[draw(st.sampled_from(["edits", "directories", "rules", "questions", "options", "enum",
                                                "items", "properties", "required", "x"]))] = value
            else:
                container.append(value)
        elif action == "drop":
            container.pop(draw(st.sampled_from(keys)))
        elif path == () and draw(st.integers(min_value=0, max_value=9)) == 0:
            event = value  # the whole body another value
        else:
            container[draw(st.sampled_from(keys))] = value
    return event


def _allows(reply: Any) -> bool:
    """Whether a reply anywhere allows a tool or accepts an elicitation."""
    if isinstance(reply, dict):
        if reply.get("behavior") == "allow" or reply.get("action") == "accept":
            return True
        return any(_allows(value) for value in reply.values())
    if isinstance(reply, list):
        return any(_allows(value) for value in reply)
    return False


async def _post_asgi(path: str, body: bytes, key: str) -> tuple[int, bytes]:
    """One POST through the whole ASGI application, as ``serve`` routes it (an exception that
    escapes is the 500 a server would send)."""
    path, _, query = path.partition("?")
    headers = [(b"host", b"testserver"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), (b"authorization", f"Bearer {key}".encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": query.encode(),
             "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    sent: list[dict] = []
    request = asyncio.Event()

    async def receive():
        if not request.is_set():
            request.set()
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(REPLY_SECONDS * 2)  # the client stays until the reply
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    try:
        await asyncio.wait_for(application(scope, receive, send), REPLY_SECONDS)
    except TimeoutError:
        return 599, b"no reply within the bound: a prompt was left parked"
    except Exception as exc:
        return 500, f"{type(exc).__name__}: {exc}".encode()
    start = next(message for message in sent if message["type"] == "http.response.start")
    return start["status"], b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")


def post(url: str, event: Any, key: str) -> tuple[int, bytes]:
    return async_to_sync(_post_asgi)(url, render(event).encode("utf-8", "surrogatepass"), key)


MULTI_EDIT_NUMBER = {**CLAUDE_EVENTS["permission_request_edit"], "tool_name": "MultiEdit",
                     "tool_input": {"file_path": "x", "edits": 5}}
DIRECTORIES_NUMBER = {**CLAUDE_EVENTS["permission_request_bash"],
                      "permission_suggestions": [{"type": "addDirectories", "directories": 5}]}


@seed(20260801)
@settings(FUZZ, max_examples=150)
@given(event=mutated_events(), url=st.sampled_from(sorted(URLS)), ending=st.sampled_from(ENDINGS))
@example(event=MULTI_EDIT_NUMBER, url="claude-web", ending="by_operator")
@example(event=MULTI_EDIT_NUMBER, url="codex-web", ending="by_operator")
@example(event=MULTI_EDIT_NUMBER, url="claude-dingtalk", ending="host_gone")
@example(event=DIRECTORIES_NUMBER, url="claude-web", ending="by_respondent")
@example(event=DIRECTORIES_NUMBER, url="claude-feishu", ending="session_cancelled")
@example(event={**CLAUDE_EVENTS["permission_request_bash"], "permission_suggestions": [
    {"type": "addRules", "rules": 5}, {"type": "setMode", "mode": {"a": [1]}}]}, url="claude-web", ending="timeout")
@example(event={**CLAUDE_EVENTS["elicitation"], "requested_schema": {"type": "object", "properties": {
    "n": {"type": "integer", "minimum": "one", "maximum": [9], "default": {"a": 1}}}}}, url="claude-web",
    ending="by_operator")
@example(event={**CLAUDE_EVENTS["elicitation"], "requested_schema": {"type": "object", "required": 5, "properties": {
    "when": {"type": "string", "format": 7, "minLength": -1, "maxLength": "x", "title": "t" * 500}}}},
    url="claude-dingtalk", ending="by_operator")
@example(event=Text("not an event"), url="codex-web", ending="by_operator")
def test_mutated_host_events_never_500_never_allow_and_leave_nothing_open(hooks, event, url, ending):
    key, how = hooks
    how["reason"] = ending
    status, body = post(URLS[url], event, key)

    assert status < 500, (url, ending, body[:300])
    if status >= 400:
        error = json.loads(body)["error"]
        assert error["code"] and error["message"]
    elif body:
        assert not _allows(json.loads(body)), body[:300]
    else:
        assert (url, status) == ("codex-web", 204)  # Codex's "no decision"
    assert not Ask.objects.filter(status__in=Ask.OPEN).exists(), (url, ending, event)
