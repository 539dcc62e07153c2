"""Attacks on ``/mcp`` (issue 11) at askcards' edge, in process through ``project.asgi``:
bodies (413 before reading, 401 without reading), hostile JSON, Host and Origin, the security
headers (the SSE responses too), the agent key, and a URL that names someone else's session.
``transport_security()`` is unit-tested in test_mcp_transport_security.py; what only the real
server can show (its own reading) is in test_mcp_server.py."""
from __future__ import annotations

import json
import logging

import pytest
from channels.db import database_sync_to_async
from django.conf import settings as django_settings

from askcards import services
from askcards.mcp.app import McpApp
from askcards.models import Agent, Ask, Session
from project.asgi import application
from tests.conftest import QUESTIONS, grant
from tests.security import mcp_wire as wire
from tests.security.edge_client import CHUNK, call
from tests.security.strategies import deep, deep_object

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

HUGE = 150 * 1024 * 1024  # declared, never sent
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
LIST_BYTES = json.dumps(LIST).encode()
INTERNAL = (-32603, 0)  # the SDK's code for a handler that raised (0: an exception it did not map)


@pytest.fixture
def no_tracebacks(caplog):
    """Fails the test when anything was logged with a traceback or at ERROR (a 500 on the way)."""
    caplog.set_level(logging.DEBUG)
    yield caplog
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [f"{r.name}: {r.getMessage()[:200]}" for r in bad]


def count(model, **filters) -> int:
    return model.objects.filter(**filters).count()


acount = database_sync_to_async(count)


def _assert_security_headers(headers: dict) -> None:
    # What Django's SecurityMiddleware and XFrameOptionsMiddleware add to every other page.
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["x-frame-options"] == "DENY"


# ------------------------------------------------------------------------------------------ bodies


@pytest.mark.parametrize("auth", [None, "Bearer not-a-key", "valid"])
async def test_oversized_content_length_is_413_before_reading_and_before_the_key(auth, agent_and_key):
    """The declared size alone refuses the request: no byte is read, and the answer is 413 whatever
    the key (a 401 would have meant the key was looked up first)."""
    extra = [] if auth is None else [("authorization", f"Bearer {agent_and_key[1]}" if auth == "valid" else auth)]
    hdrs = wire.headers(None) + extra + [("content-length", str(HUGE))]
    response = await call("POST", f"/mcp?{wire.WEB}", headers=hdrs, stream_bytes=4 * len(CHUNK))
    assert response.status == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert response.pulled_messages == 0
    _assert_security_headers(response.headers)


@pytest.mark.parametrize("auth", [None, "Bearer not-a-key", "Basic YWxpY2U6cHc="])
@pytest.mark.parametrize("declared", [True, False])
async def test_an_unauthenticated_client_cannot_make_the_app_read_its_body(auth, declared, db, no_tracebacks):
    """A body that never ends (with a Content-Length within the limit, or chunked): the 401 comes
    at once and not one message of the body was pulled."""
    hdrs = wire.headers(None) + ([("authorization", auth)] if auth else [])
    if declared:
        hdrs.append(("content-length", str(django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE)))
    response = await wire.endless(application, "/mcp", hdrs, query=wire.WEB)
    assert response.status == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "invalid_key"
    assert response.pulled_messages == 0


async def test_an_authenticated_body_that_never_ends_is_cut_at_the_limit(agent_and_key):
    response = await wire.endless(application, "/mcp", wire.headers(agent_and_key[1]), query=wire.WEB)
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert response.status == 413 and response.json()["error"]["code"] == "request_too_large"
    assert limit < response.pulled_bytes <= limit + len(CHUNK)


async def test_a_streamed_body_past_the_limit_is_413(agent_and_key):
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = await call("POST", f"/mcp?{wire.WEB}", headers=wire.headers(agent_and_key[1]), stream_bytes=2 * limit)
    assert response.status == 413 and response.json()["error"]["code"] == "request_too_large"
    assert limit < response.pulled_bytes <= limit + len(CHUNK)


@pytest.mark.parametrize("mcp_limit", [1000, 2_621_440])
async def test_the_mcp_app_alone_keeps_the_same_order(mcp_limit, agent_and_key, settings):
    """Without BoundedBody in front (any other ASGI composition), McpApp itself refuses a declared
    oversize before the key, a keyless request before its body, and a long stream at the limit."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = mcp_limit
    app = McpApp()
    over = [("content-length", str(mcp_limit + 1))]
    for hdrs in (wire.headers(None) + over, wire.headers("not-a-key") + over):
        refused = await wire.endless(app, "/mcp", hdrs, query=wire.WEB)
        assert (refused.status, refused.pulled_messages) == (413, 0)
    refused = await wire.endless(app, "/mcp", wire.headers("not-a-key"), query=wire.WEB)
    assert (refused.status, refused.pulled_messages) == (401, 0)
    cut = await wire.endless(app, "/mcp", wire.headers(agent_and_key[1]), query=wire.WEB)
    assert cut.status == 413 and mcp_limit < cut.pulled_bytes <= mcp_limit + len(CHUNK)


@pytest.mark.parametrize("value", ["abc", "-1", "1e6", "12, 12", " ", "0x10"])
async def test_malformed_content_length_is_400(value, agent_and_key):
    hdrs = wire.headers(agent_and_key[1]) + [("content-length", value)]
    response = await call("POST", f"/mcp?{wire.WEB}", headers=hdrs, body=LIST_BYTES)
    assert response.status == 400 and response.json()["error"]["code"] == "bad_request"
    assert response.pulled_messages == 0


async def test_two_content_lengths_are_400(agent_and_key):
    hdrs = wire.headers(agent_and_key[1]) + [("content-length", "10"), ("content-length", str(len(LIST_BYTES)))]
    response = await call("POST", f"/mcp?{wire.WEB}", headers=hdrs, body=LIST_BYTES)
    assert response.status == 400 and response.pulled_messages == 0


# ----------------------------------------------------------------------------------------- parsing

HOSTILE_BODIES = {
    "nested arrays": b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":' + deep().encode() + b"}",
    "nested objects": deep_object().encode(),
    "64+1 levels in arguments": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"q": "PLACEHOLDER"}}}).replace('"PLACEHOLDER"', deep(65)).encode(),
    "NaN id": b'{"jsonrpc":"2.0","id":NaN,"method":"tools/list"}',
    "Infinity in params": b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":-Infinity}}',
    "1e999": b'{"jsonrpc":"2.0","id":1e999,"method":"tools/list"}',
    "5000-digit id": b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"tools/list"}',
    "not UTF-8": b'{"jsonrpc":"2.0","id":1,"method":"tools/\xff\xfe"}',
    "UTF-16": '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'.encode("utf-16"),
    "lone surrogate id": b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}',
    "lone surrogate key": b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"\\udfff":1}}',
    "NUL in method": b'{"jsonrpc":"2.0","id":1,"method":"tools/list\\u0000"}',
    "NUL in an argument": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "ask_user_questions", "arguments": {"questions": [{**QUESTIONS[0], "question": "a\x00b"}]}}}).encode(),
    "raw NUL byte": b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\x00',
    "empty": b"",
    "truncated": b'{"jsonrpc":"2.0","id":1,"method":"tools/li',
    "a string": b'"tools/list"',
    "null": b"null",
}


@pytest.mark.parametrize("name", HOSTILE_BODIES)
async def test_hostile_json_is_a_clean_parse_error(name, agent_and_key, present_session, no_tracebacks):
    """Refused as a JSON-RPC error with HTTP 400 (nothing reaches a handler; no ask is made)."""
    answer = await wire.post(agent_and_key[1], HOSTILE_BODIES[name])
    assert answer.status == 400, answer.exchange.body[:300]
    assert answer.final["jsonrpc"] == "2.0" and answer.final["id"] is None
    assert answer.error["code"] in (-32700, -32600, -32602)
    _assert_security_headers(answer.headers)
    assert await acount(Ask) == 0


async def test_the_parse_error_names_the_rule_broken(agent_and_key):
    cases = {"nested arrays": "nested deeper than 64 levels", "NaN id": "NaN, Infinity",
             "not UTF-8": "not UTF-8", "lone surrogate id": "lone UTF-16 surrogate", "NUL in method": "NUL character"}
    for name, words in cases.items():
        answer = await wire.post(agent_and_key[1], HOSTILE_BODIES[name])
        assert answer.error["code"] == -32700 and words in answer.error["message"], (name, answer.error)


@pytest.mark.parametrize("batch", [
    [LIST, LIST],
    [LIST],
    [],
    [{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
      "params": {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}}],
])
async def test_a_json_rpc_batch_is_refused_and_runs_nothing(batch, agent_and_key, present_session, no_tracebacks):
    """MCP has no batches since 2025-06-18: an array is refused whole, and no call in it runs."""
    answer = await wire.post(agent_and_key[1], batch)
    assert answer.status == 400
    assert answer.error["code"] in (-32600, -32602)
    assert await acount(Ask) == 0


@pytest.mark.parametrize("message", [
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
])
async def test_a_notification_shaped_body_is_accepted_and_changes_nothing(
        message, agent_and_key, pending_ask, no_tracebacks):
    """A stray notifications/cancelled for an id nobody is waiting on cancels no ask: 202, nothing else."""
    answer = await wire.post(agent_and_key[1], message)
    assert (answer.status, answer.exchange.body) == (202, b"")
    _assert_security_headers(answer.headers)
    await database_sync_to_async(pending_ask.refresh_from_db)()
    assert pending_ask.status == Ask.Status.PENDING


@pytest.mark.parametrize("message", [
    {"jsonrpc": "2.0", "id": 1, "result": {}},
    {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": False}},
    {"jsonrpc": "2.0", "id": "q_1", "error": {"code": -32000, "message": "x"}},
    {"jsonrpc": "2.0", "id": None, "result": {"action": "decline"}},
])
async def test_a_response_to_no_request_askcards_sent_is_refused_and_changes_nothing(
        message, agent_and_key, pending_ask, no_tracebacks):
    """The only requests askcards sends are the host surface's forms, whose ids it signs
    (tests/security/test_mcp_host_responses.py): a response answering anything else is a 400."""
    answer = await wire.post(agent_and_key[1], message)
    assert answer.status == 400 and answer.error["code"] == -32600
    _assert_security_headers(answer.headers)
    await database_sync_to_async(pending_ask.refresh_from_db)()
    assert pending_ask.status == Ask.Status.PENDING


@pytest.mark.parametrize("message", [
    {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
    {"id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": [1], "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1, "method": 7},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": []},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "ask_user_questions"},
])
async def test_a_malformed_envelope_is_refused_or_ignored(message, agent_and_key, present_session, no_tracebacks):
    """A 4xx, a JSON-RPC error, or (an id the SDK cannot read makes it a notification) a bare 202;
    never a result, never an internal error."""
    answer = await wire.post(agent_and_key[1], message)
    assert answer.status in (200, 202, 400), answer.exchange.body[:300]
    if answer.status == 202:
        assert answer.exchange.body == b""
    else:
        assert answer.error is not None and answer.error["code"] not in INTERNAL
    assert await acount(Ask) == 0


@pytest.mark.parametrize("hdrs, status", [
    ([("content-type", "text/plain"), ("accept", wire.ACCEPT)], 400),
    ([("content-type", "application/json")], 406),
    ([("content-type", "application/json"), ("accept", "text/html")], 406),
])
async def test_wrong_content_type_or_accept_is_a_clean_4xx(hdrs, status, agent_and_key, no_tracebacks):
    hdrs = hdrs + [("authorization", f"Bearer {agent_and_key[1]}"), ("content-length", str(len(LIST_BYTES)))]
    response = await call("POST", f"/mcp?{wire.WEB}", headers=hdrs, body=LIST_BYTES)
    assert response.status == status
    _assert_security_headers(response.headers)


@pytest.mark.parametrize("method", ["DELETE", "PUT", "PATCH"])
async def test_other_methods_are_refused(method, agent_and_key):
    hdrs = wire.headers(agent_and_key[1]) + [("content-length", str(len(LIST_BYTES)))]
    response = await call(method, f"/mcp?{wire.WEB}", headers=hdrs, body=LIST_BYTES)
    assert response.status == 405
    _assert_security_headers(response.headers)


# ---------------------------------------------------------------------------------- Host and Origin


@pytest.mark.parametrize("host", ["evil.example", "testserver.evil.example", "testserver:80@evil.example",
                                  "127.0.0.1.evil.example:8000"])
@pytest.mark.parametrize("keyed", [True, False])
async def test_a_host_not_allowed_is_400_before_anything_else(host, keyed, agent_and_key, caplog):
    with caplog.at_level(logging.WARNING):
        response = await call("POST", f"/mcp?{wire.WEB}", host=host, body=LIST_BYTES,
                              headers=wire.headers(agent_and_key[1] if keyed else None)
                              + [("content-length", str(len(LIST_BYTES)))])
    assert response.status == 400
    assert response.json()["error"] == {"code": "bad_request",
                                        "message": "Invalid Host header: this server does not serve that host."}
    assert response.pulled_messages == 0
    assert [r.name for r in caplog.records if r.levelno >= logging.WARNING] == ["django.security.DisallowedHost"]
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("origin", [
    "http://evil.example",
    "http://testserver:8000",  # the site's host on another port
    "https://testserver",  # the site's host and port, another scheme
    "http://testserver.evil.example",
    "null",  # a sandboxed iframe or a file: page
    "http://127.0.0.1:8000",  # an allowed host, but not this request's own origin nor a trusted one
])
@pytest.mark.parametrize("keyed", [True, False])
async def test_a_foreign_browser_origin_is_403_before_the_body_and_the_key(origin, keyed, agent_and_key,
                                                                            present_session):
    """A page on another origin cannot drive an agent's key (or probe for one) from a browser."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}}).encode()
    hdrs = wire.headers(agent_and_key[1] if keyed else None, origin=origin) + [("content-length", str(len(body)))]
    response = await call("POST", f"/mcp?{wire.WEB}", body=body, headers=hdrs)
    assert response.status == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert response.pulled_messages == 0
    _assert_security_headers(response.headers)
    assert await acount(Ask) == 0


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_the_sites_own_origin_is_served(era, agent_and_key):
    answer = await wire.rpc(agent_and_key[1], "tools/list", era=era, origin="http://testserver")
    assert answer.status == 200
    assert [tool["name"] for tool in answer.result["tools"]] == ["ask_user_questions"]


async def test_the_public_url_and_trusted_origins_are_served(agent_and_key, settings):
    settings.ASKCARDS_PUBLIC_URL = "https://asks.example.com"
    settings.CSRF_TRUSTED_ORIGINS = ["https://asks.example.com", "https://*.example.org"]
    for origin in ("https://asks.example.com", "https://panel.example.org"):
        answer = await wire.rpc(agent_and_key[1], "tools/list", origin=origin)
        assert answer.status == 200, (origin, answer.exchange.body[:200])
        assert answer.result["tools"]
    for origin in ("http://asks.example.com", "https://asks.example.com:8443", "https://example.org.evil.net"):
        answer = await wire.rpc(agent_and_key[1], "tools/list", origin=origin)
        assert answer.status == 403, origin


# --------------------------------------------------------------------------------- security headers


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_mcp_responses_carry_the_security_headers(era, agent_and_key):
    """The SDK's own responses (an SSE stream in the initialize era, JSON in the stateless one)."""
    answer = await wire.rpc(agent_and_key[1], "tools/list", era=era)
    expected = "text/event-stream" if era == wire.LEGACY else "application/json"
    assert answer.status == 200 and answer.headers["content-type"].startswith(expected)
    _assert_security_headers(answer.headers)
    assert "strict-transport-security" not in answer.headers  # plain http
    error = await wire.rpc(agent_and_key[1], "tools/list", era=era, query="")  # no session: a JSON-RPC error
    assert error.error["code"] == -32602
    _assert_security_headers(error.headers)


async def test_a_streamed_tool_call_carries_the_security_headers(agent_and_key, web_session):
    """A tools/call's answer (here the ask fails at once: alice's panel is not open, so it is one
    JSON reply; a call that waits streams, see tests/mcp)."""
    answer = await wire.rpc(agent_and_key[1], "tools/call", {"name": "ask_user_questions",
                                                            "arguments": {"questions": QUESTIONS}})
    assert answer.headers["content-type"].split(";")[0] in ("text/event-stream", "application/json")
    assert answer.result["isError"] is True and answer.result["structuredContent"]["status"] == "failed"
    _assert_security_headers(answer.headers)


async def test_refusals_carry_the_security_headers(agent_and_key):
    key = agent_and_key[1]
    answers = [
        (await wire.post(None, LIST)).exchange,  # 401
        (await wire.post(key, b"[" * 100)).exchange,  # 400 parse error
        (await wire.post(key, LIST, origin="http://evil.example")).exchange,  # 403
        await call("GET", "/mcp", headers=[("accept", "text/event-stream")]),  # 401 on GET too
    ]
    assert [a.status for a in answers] == [401, 400, 403, 401]
    for exchange in answers:
        _assert_security_headers(exchange.headers)


async def test_hsts_on_the_sse_stream_follows_django(agent_and_key, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.X_FRAME_OPTIONS = "SAMEORIGIN"
    answer = await wire.rpc(agent_and_key[1], "tools/list", scheme="https")
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["strict-transport-security"] == "max-age=31536000; includeSubDomains"
    assert answer.headers["x-frame-options"] == "SAMEORIGIN"
    refused = await wire.post(None, LIST, scheme="https")
    assert refused.status == 401 and refused.headers["strict-transport-security"].startswith("max-age=31536000")


# -------------------------------------------------------------------------------------- agent keys


def _deactivate(agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(is_active=False)


@pytest.mark.parametrize("kind", ["missing", "empty", "basic", "token", "bearer only", "two words", "unknown",
                                  "key without scheme", "deactivated", "rotated away", "NUL", "huge"])
async def test_a_bad_key_is_401_with_bearer_challenge_and_never_logged(kind, agent_and_key, caplog):
    agent, key = agent_and_key
    authorization = {
        "missing": None, "empty": "", "basic": f"Basic {key}", "token": f"Token {key}", "bearer only": "Bearer ",
        "two words": f"Bearer {key} {key}", "unknown": "Bearer ak_" + "x" * 43, "key without scheme": key,
        "deactivated": f"Bearer {key}", "rotated away": f"Bearer {key}", "NUL": f"Bearer {key}\x00",
        "huge": "Bearer " + "k" * 100_000,
    }[kind]
    if kind == "deactivated":
        await database_sync_to_async(_deactivate)(agent)
    if kind == "rotated away":
        await database_sync_to_async(services.agent_rotate_key)(agent=agent)
    extra = [] if authorization is None else [("authorization", authorization)]
    caplog.set_level(logging.DEBUG)
    for method, body in (("POST", LIST_BYTES), ("GET", b"")):
        hdrs = wire.headers(None) + extra + [("content-length", str(len(body)))]
        response = await call(method, f"/mcp?{wire.WEB}", headers=hdrs, body=body)
        assert response.status == 401, (method, response.body[:200])
        assert response.headers["www-authenticate"].startswith("Bearer")
        error = response.json()["error"]
        assert error["code"] == "invalid_key" and error["message"]
        assert key not in response.body.decode()
        assert response.pulled_messages == 0
    if kind == "deactivated":
        assert error["message"] == "This agent is deactivated."
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert key not in logged and key[3:20] not in logged
    assert "refused POST /mcp: 401" in logged
    assert not any(r.exc_info for r in caplog.records)


async def test_a_good_key_is_never_logged_either(agent_and_key, caplog):
    caplog.set_level(logging.DEBUG)
    answer = await wire.rpc(agent_and_key[1], "tools/list")
    assert answer.status == 200
    assert agent_and_key[1] not in "\n".join(r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------- sessions named by the URL

TASK_CALL = {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "task": {}}


@pytest.fixture
def carol_of_agent_b(other_agent):
    """carol, a web user granted to agent-b only; agent-b's web session for bob, key "shared"."""
    grant(other_agent, "carol")
    session, _ = services.session_upsert(agent=other_agent, key="shared", platform="web", web_user="bob")
    return session


def _session_state(session_id):
    session = Session.objects.get(pk=session_id)
    return session.agent_id, session.key, session.platform, session.web_user, session.user_id


async def test_naming_another_agents_session_key_reaches_only_your_own(agent_and_key, carol_of_agent_b, no_tracebacks):
    agent, key = agent_and_key
    before = await database_sync_to_async(_session_state)(carol_of_agent_b.id)
    answer = await wire.rpc(key, "tools/call", TASK_CALL, query="session=shared&platform=web&web_user=alice")
    task = answer.result["task"]
    ask = await database_sync_to_async(Ask.objects.select_related("session").get)(pk=task["taskId"])
    assert ask.session.agent_id == agent.id and ask.session.key == "shared" and ask.session.web_user == "alice"
    assert await database_sync_to_async(_session_state)(carol_of_agent_b.id) == before
    assert await acount(Ask, session=carol_of_agent_b) == 0


async def test_a_session_id_in_the_url_is_a_key_of_your_own_not_a_handle(agent_and_key, carol_of_agent_b):
    key = agent_and_key[1]
    answer = await wire.rpc(key, "tools/list", query=f"session={carol_of_agent_b.id}")
    assert answer.error["code"] == -32602 and "cannot infer the platform" in answer.error["message"]
    assert await acount(Session, agent=agent_and_key[0]) == 0


@pytest.mark.parametrize("query, words", [
    ("session=web/carol&platform=web&web_user=carol", "may not ask web user 'carol'"),  # granted to agent-b only
    ("session=web/alice&platform=web&web_user=carol", "may not ask web user 'carol'"),  # repoint one's own session
    ("session=web/dave&platform=web&web_user=dave", "may not ask web user 'dave'"),  # no such user: same answer
    ("session=web/alice&platform=web&web_user=CAROL", "may not ask web user 'CAROL'"),
    ("session=web/alice&platform=web&web_user=carol%00", "Null characters are not allowed"),
])
async def test_a_web_user_not_granted_is_refused_and_nothing_is_written(query, words, agent_and_key, web_session,
                                                                         carol_of_agent_b, no_tracebacks):
    before = await database_sync_to_async(_session_state)(web_session.id)
    for method, params in (("tools/list", None), ("tools/call", TASK_CALL)):
        answer = await wire.rpc(agent_and_key[1], method, params, query=query)
        assert answer.status == 200 and answer.error["code"] == -32602, answer.final
        assert words in answer.error["message"], answer.error
    assert await database_sync_to_async(_session_state)(web_session.id) == before
    assert await acount(Session, agent=agent_and_key[0]) == 1 and await acount(Ask) == 0


async def test_a_revoked_web_user_cannot_be_asked_through_an_old_session(agent_and_key, present_session):
    agent, key = agent_and_key
    await database_sync_to_async(services.agent_revoke)(agent=agent, username="alice", actor="test")
    for query in (wire.WEB, "session=web/alice"):
        answer = await wire.rpc(key, "tools/call", TASK_CALL, query=query)
        assert answer.error["code"] == -32602 and "may not ask web user 'alice'" in answer.error["message"]
    assert await acount(Ask) == 0


async def test_another_agents_task_is_out_of_reach(agent_and_key, other_agent, no_tracebacks):
    """Task ids are ask ids: another agent's is "no task" for get, result, cancel, and not listed."""
    theirs, _ = await database_sync_to_async(services.session_upsert)(agent=other_agent, key="web/bob", platform="web",
                                                                     web_user="bob")
    from tests.surfaces import RecordingSurface
    RecordingSurface.present.add(theirs.id)
    outcome = await database_sync_to_async(services.tool_call)(agent=other_agent, session=theirs,
                                                               name="ask_user_questions",
                                                               arguments={"questions": QUESTIONS})
    assert outcome.status == "pending"
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        answer = await wire.rpc(agent_and_key[1], method, {"taskId": outcome.ask.id})
        assert answer.error["code"] == -32602 and "no task" in answer.error["message"], method
    listed = await wire.rpc(agent_and_key[1], "tasks/list")
    assert listed.result["tasks"] == []
    assert (await database_sync_to_async(Ask.objects.get)(pk=outcome.ask.id)).status == Ask.Status.PENDING


BAD_CURSORS = {
    "impossible date": "2024-02-30T00:00:00+00:00|q_" + "0" * 32,
    "issue's example": "2024-02-30T00:00:00|q",
    "offset past a day": "2024-01-01T00:00:00+25:00|q_" + "0" * 32,
    "no offset": "2024-01-01T00:00:00|q_" + "0" * 32,
    "not a date": "yesterday|q_" + "0" * 32,
    "not an ask id": "2024-01-01T00:00:00+00:00|x",
    "no separator": "q_" + "0" * 32,
}


@pytest.mark.parametrize("name", BAD_CURSORS)
async def test_a_malformed_tasks_list_cursor_is_invalid_params_not_an_internal_error(name, agent_and_key, no_tracebacks):
    answer = await wire.rpc(agent_and_key[1], "tasks/list", {"cursor": BAD_CURSORS[name]})
    assert answer.error is not None, answer.final
    assert answer.error["code"] == -32602
    assert "invalid tasks/list cursor" in answer.error["message"]


async def test_the_next_cursor_pages_through_every_task(agent_and_key, web_session, no_tracebacks, settings):
    from tests.surfaces import RecordingSurface
    from askcards.mcp.context import TASKS_PAGE_SIZE

    settings.ASKCARDS_QUOTA_PENDING_PER_RESPONDENT = 0  # more open asks for alice than the default allows
    RecordingSurface.present.add(web_session.id)
    made = set()
    for _ in range(TASKS_PAGE_SIZE + 3):
        outcome = await database_sync_to_async(services.tool_call)(
            agent=agent_and_key[0], session=web_session, name="ask_user_questions", arguments={"questions": QUESTIONS})
        made.add(outcome.ask.id)
    first = await wire.rpc(agent_and_key[1], "tasks/list")
    second = await wire.rpc(agent_and_key[1], "tasks/list", {"cursor": first.result["nextCursor"]})
    assert "nextCursor" not in second.result
    assert {task["taskId"] for task in first.result["tasks"] + second.result["tasks"]} == made


ODD_KEYS = {
    "slashes": ("a/b/../c//d", "a/b/../c//d"),
    "encoded slashes": ("a%2Fb%2F..%2F..%2Fetc", "a/b/../../etc"),
    "unicode": ("%E9%95%B7%E3%81%84/%F0%9F%98%80", "長い/😀"),
    "500 characters": ("k" * 500, "k" * 500),
    "spaces and plus": ("a+b%20c", "a b c"),
    "newline": ("a%0Ab", "a\nb"),
}


@pytest.mark.parametrize("name", ODD_KEYS)
async def test_an_odd_but_valid_session_key_is_stored_exactly(name, agent_and_key, no_tracebacks):
    raw, key = ODD_KEYS[name]
    answer = await wire.rpc(agent_and_key[1], "tools/list", query=f"session={raw}&platform=web")
    assert [tool["name"] for tool in answer.result["tools"]] == ["ask_user_questions"]
    assert await database_sync_to_async(lambda: list(Session.objects.values_list("key", flat=True)))() == [key]


BAD_QUERIES = {
    "NUL": ("session=web%00alice&platform=web", "Null characters are not allowed"),
    "501 characters": ("session=" + "k" * 501 + "&platform=web", "no more than 500 characters"),
    "5000 characters": ("session=" + "%E9%95%B7" * 5000 + "&platform=web", "no more than 500 characters"),
    "empty": ("session=&platform=web", "names no session"),
    "none": ("platform=web", "names no session"),
    "twice": ("session=a&session=b&platform=web", "'session' is given twice"),
    "unknown parameter": ("session=a&platform=web&agent=agent-b", "unknown URL parameter 'agent'"),
    "parent smuggled": ("session=a&platform=web&parent=shared", "unknown URL parameter 'parent'"),
    "bad platform": ("session=a&platform=admin", "is not a valid choice"),
    "unknown bot": ("session=a&platform=feishu&bot=cli_nope", "was not granted that bot"),
    "NUL in user_id": ("session=a&platform=web&user_id=%00", "Null characters are not allowed"),
    "NUL in sender_id": ("session=a&platform=web&sender_id=al%00ice", "NUL character"),
    "long sender_id": ("session=a&platform=web&sender_id=" + "s" * 201, "longer than 200 characters"),
}


@pytest.mark.parametrize("name", BAD_QUERIES)
@pytest.mark.parametrize("method", ["tools/list", "tools/call"])
async def test_a_bad_session_url_is_a_clean_error_and_writes_nothing(name, method, agent_and_key, no_tracebacks):
    query, words = BAD_QUERIES[name]
    answer = await wire.rpc(agent_and_key[1], method, TASK_CALL if method == "tools/call" else None, query=query)
    assert answer.status == 200
    assert answer.error["code"] == -32602 and words in answer.error["message"], answer.error
    assert await acount(Session) == 0 and await acount(Ask) == 0


@pytest.mark.parametrize("escaped, stored", [("%FF%FE", "\ufffd\ufffd"), ("a%C3", "a\ufffd"),
                                              ("%ED%A0%80", "\ufffd\ufffd\ufffd")])  # the last: a lone surrogate
async def test_percent_escapes_that_are_not_utf8_become_replacement_characters(escaped, stored, agent_and_key,
                                                                                no_tracebacks):
    answer = await wire.rpc(agent_and_key[1], "tools/list", query=f"session={escaped}&platform=web")
    assert answer.result["tools"]
    assert await database_sync_to_async(lambda: list(Session.objects.values_list("key", flat=True)))() == [stored]


# ------------------------------------------------------------------------------- what never leaks


async def test_a_query_that_is_not_utf8_is_400_not_a_500(agent_and_key, no_tracebacks):
    """daphne refuses such request lines itself; any other ASGI server hands them on."""
    exchange = await call("POST", "/mcp", headers=wire.headers(agent_and_key[1]), body=LIST_BYTES,
                          query_string=b"session=\xff\xfe")
    assert exchange.status == 400
    assert json.loads(exchange.body)["error"]["message"] == "The request's path and query must be UTF-8."


async def test_an_unexpected_failure_is_a_generic_error_without_its_text(agent_and_key, present_session, monkeypatch, caplog):
    """A bug or an outage inside a handler: the client learns nothing of it but that it failed; the
    log keeps the traceback (the SDK would otherwise send the exception's text verbatim)."""

    def broken(**kwargs):
        raise RuntimeError("connection to server at 10.0.0.7 failed: password authentication failed for askcards")

    monkeypatch.setattr(services, "tool_call", broken)
    caplog.set_level(logging.ERROR)
    answer = await wire.rpc(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}})
    assert answer.error == {"code": -32603, "message": "internal error; the server log has the details"}
    assert "10.0.0.7" not in answer.exchange.body.decode()
    assert any("10.0.0.7" in (r.exc_text or "") or r.exc_info for r in caplog.records if r.name == "askcards.mcp.server")
