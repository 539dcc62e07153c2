"""``/mcp`` under hypothesis fuzzing (bounded), with a valid agent key, in process through
``project.asgi``: JSON-RPC bodies of any shape (random methods, ids and params, tools/call and
tasks/* with hostile arguments, ``_meta`` and ``task`` values, either protocol revision's headers,
hostile JSON fragments such as deep nesting, NaN and lone surrogates), and odd session URLs.

For every request: the HTTP status is below 500, no JSON-RPC answer is an internal error (a
handler that raised), nothing is logged at ERROR or with a traceback, and no ask exists that the
response does not name: a call answered with an error, or a malformed one, creates no ask.

alice's panel is not open (the recording surface has nobody present), so an ask a well-formed
call does create fails at once: no call parks, and every example answers in milliseconds."""
from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest
from channels.db import database_sync_to_async
from hypothesis import example, given, settings
from hypothesis import strategies as st

from askcards.models import Ask
from tests.conftest import QUESTIONS
from tests.security import mcp_wire as wire

from .strategies import FUZZ, NASTY_TEXT, Raw, deep, deep_object, header_text, hostile_values, json_values, render

pytestmark = pytest.mark.django_db(transaction=True)

METHODS = ["initialize", "ping", "tools/list", "tools/call", "tasks/get", "tasks/result", "tasks/cancel", "tasks/list",
           "notifications/cancelled", "notifications/initialized", "notifications/progress", "resources/list",
           "prompts/get", "completion/complete", "logging/setLevel", "sampling/createMessage"]
TOOLS = ["ask_user_questions", "dingtalk_ask_user_question", "ASK_USER_QUESTIONS", "", "tools/call"]
INTERNAL = (-32603, 0)
ASK_ID = re.compile(r"q_[0-9a-f]{32}")


@pytest.fixture
def runner(caplog):
    """One event loop for every example (the SDK's manager is started once per loop)."""
    caplog.set_level(logging.WARNING)
    with asyncio.Runner() as loop:
        yield loop


def mostly(common, rare, odds: int = 4):
    """``common`` ``odds`` times out of ``odds + 1``: most requests get past the door."""
    return st.sampled_from([True] * odds + [False]).flatmap(lambda common_one: common if common_one else rare)


often = st.sampled_from([True, True, True, True, False])  # True four times out of five
# JSON values askcards' parser reads (no NUL, no lone surrogate), so most requests reach a
# handler; now and then one with a fragment the parser refuses (deep nesting, NaN, \ud800, \u0000).
storable_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=30)
readable = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text | st.sampled_from([text for text in NASTY_TEXT if not re.search("[\x00\ud800-\udfff]", text)]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(storable_text, children, max_size=4),
    max_leaves=12,
)
values = mostly(readable, hostile_values | json_values, odds=7)


def hostile_or(*plain):
    return st.sampled_from(plain) | values


@st.composite
def questions(draw):
    """The valid questions with hostile values where they hurt (or hostile values outright)."""
    if not draw(often):
        return draw(values)
    question = dict(QUESTIONS[0])
    for name in draw(st.lists(st.sampled_from(["question", "header", "options", "multiSelect", "extra"]), max_size=2)):
        question[name] = draw(values)
    if draw(st.booleans()):
        question["options"] = [dict(option, label=draw(hostile_or("PostgreSQL", "", "Other"))) for option in
                               QUESTIONS[0]["options"]]
    return draw(st.sampled_from([[question], [question] * 5, [], question]))


@st.composite
def params_for(draw, method: str):
    kind = draw(st.sampled_from(["shaped", "shaped", "shaped", "tool", "any"]))
    if kind == "any":
        return draw(values)
    params: dict = {}
    if method == "tools/call" or kind == "tool":
        params["name"] = draw(hostile_or(*TOOLS))
        params["arguments"] = draw(mostly(st.fixed_dictionaries({"questions": questions()}), values, odds=3))
        if draw(st.booleans()):
            params["task"] = draw(hostile_or({}, {"ttl": 1000}, {"ttl": -1}))
    elif method.startswith("tasks/"):
        params["taskId"] = draw(hostile_or("q_" + "0" * 32, "q_x", ""))
        if draw(st.booleans()):
            params["cursor"] = draw(hostile_or("", "2020-01-01T00:00:00+00:00|q_x", "|", "nan|q_1"))
    elif method == "initialize":
        params = {"protocolVersion": draw(hostile_or(wire.LEGACY, "2025-06-18", "1999-01-01")),
                  "capabilities": draw(hostile_or({})), "clientInfo": draw(hostile_or({"name": "x", "version": "1"}))}
    elif method == "notifications/cancelled":
        params["requestId"] = draw(hostile_or(1, "1"))
    if draw(st.booleans()):
        params["_meta"] = draw(st.fixed_dictionaries({}, optional={
            "io.askcards/call_id": hostile_or("c-1", "", "x" * 201),
            "io.askcards/timeout_seconds": hostile_or(1, 0, -1, 10**12, 1.5, "60"),
            "progressToken": hostile_or(1, "p"),
            "io.modelcontextprotocol/protocolVersion": hostile_or(wire.MODERN, wire.LEGACY),
            "io.modelcontextprotocol/clientCapabilities": hostile_or({}),
        }))
    return params


QUERIES = [wire.WEB, "session=web/alice", "", "session=fuzz&platform=wechat",
           "session=fuzz&platform=web&web_user=carol",
           "session=a%00b&platform=web", "session=web/alice&sender_id=%00", "session=" + "k" * 600 + "&platform=web"]


@st.composite
def mcp_requests(draw):
    """(body bytes, protocol-version header or None, extra headers, query)."""
    method = draw(mostly(st.sampled_from(["tools/call"] * 4 + METHODS),
                         st.sampled_from(NASTY_TEXT) | st.text(max_size=20)))
    message = {"jsonrpc": draw(mostly(st.just("2.0"), st.sampled_from(["1.0", None, 2.0]), odds=9))}
    if draw(often):
        message["id"] = draw(mostly(st.integers(-(2**63), 2**63) | st.text(max_size=10), st.none() | values))
    message["method"] = method
    if draw(often):
        message["params"] = draw(params_for(method))
    era = draw(mostly(st.sampled_from([wire.LEGACY, wire.MODERN]), st.none() | header_text | st.just("2025-06-18")))
    extra = []
    enveloped = draw(mostly(st.just(True), st.just(False)))  # the 2026-07-28 envelope and its headers
    if era == wire.MODERN and isinstance(message.get("params", {}), dict) and enveloped:
        message, extra = wire.request(method, message.get("params"), id=message.get("id", 1), era=wire.MODERN)
    for name in draw(st.lists(st.sampled_from(["mcp-method", "mcp-name", "mcp-session-id", "last-event-id"]),
                              max_size=2)):
        extra.append((name, draw(header_text)))
    body = render({k: v for k, v in message.items() if v is not None}).encode("utf-8", "surrogatepass")
    return body, era, extra, draw(mostly(st.just(wire.WEB), st.sampled_from(QUERIES)))


def _asks() -> set[str]:
    return set(Ask.objects.values_list("id", flat=True))


_asks_async = database_sync_to_async(_asks)


def _check(runner, caplog, key: str, body: bytes, era, extra, query: str) -> None:
    caplog.clear()

    async def exchange():
        before = await _asks_async()
        answer = await wire.post(key, body, query=query, version=era, extra=extra)
        return answer, await _asks_async() - before

    answer, new_asks = runner.run(exchange())
    shown = answer.exchange.body[:400]
    assert answer.status < 500, shown
    for message in answer.messages:
        assert (message.get("error") or {}).get("code") not in INTERNAL, shown
    named = set(ASK_ID.findall(answer.exchange.body.decode("utf-8", "replace")))
    answered = bool(answer.messages) and "result" in answer.messages[-1]
    assert new_asks <= (named if answered else set()), (new_asks, shown)
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [f"{r.name}: {r.getMessage()[:300]}" for r in bad]


ATTACKS = [
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_user_questions","arguments":'
     + deep().encode() + b"}}", wire.LEGACY, [], wire.WEB),
    (deep_object().encode(), wire.LEGACY, [], wire.WEB),
    (render({"jsonrpc": "2.0", "id": Raw("NaN"), "method": "tools/list"}).encode(), wire.LEGACY, [], wire.WEB),
    (render({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": [{**QUESTIONS[0], "header": "\ud800"}]}}}
    ).encode("utf-8", "surrogatepass"), wire.LEGACY, [], wire.WEB),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": QUESTIONS},
        "_meta": {"io.askcards/call_id": 7, "io.askcards/timeout_seconds": 10**30}}}).encode(),
     wire.LEGACY, [], wire.WEB),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "task": {"ttl": "forever"}}}).encode(),
     wire.LEGACY, [], wire.WEB),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {"cursor": "9999-99-99|q_1"}}).encode(),
     wire.LEGACY, [], wire.WEB),
    (json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}}]).encode(), wire.LEGACY, [], wire.WEB),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}}).encode(), wire.MODERN, [], wire.WEB),
    (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask_user_questions",
     "arguments": {"questions": QUESTIONS}}}).encode(), wire.LEGACY, [], "session=web/alice&sender_id=%00"),
]


def _attack_examples(test):
    for body, era, extra, query in ATTACKS:
        test = example(request=(body, era, extra, query))(test)
    return test


@settings(FUZZ, max_examples=200)  # ~20 ms each
@given(request=mcp_requests())
@_attack_examples
def test_any_json_rpc_to_mcp_answers_below_500_and_creates_no_unnamed_ask(runner, caplog, agent_and_key, web_session,
                                                                          request):
    _check(runner, caplog, agent_and_key[1], *request)


def test_the_harness_reaches_the_tools(runner, caplog, agent_and_key, web_session):
    """The fuzzing above is not all refused at the door: the same harness makes (failed) asks."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "task": {}}}).encode()
    _check(runner, caplog, agent_and_key[1], body, wire.LEGACY, [], wire.WEB)
    assert Ask.objects.filter(session=web_session, status=Ask.Status.FAILED).count() == 1
