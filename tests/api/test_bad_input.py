"""Bad input to every agent API endpoint (SPEC §7, §9): a clear error in the one error shape, the
right status and code, and no change to any state."""

from __future__ import annotations

import copy
import json

import pytest

from askcards import services
from askcards.models import Agent, Ask, OutboxEvent, Session
from tests.conftest import QUESTIONS, answer_for

from .conftest import (
    ASK_PATH_ENDPOINTS,
    BODY_ENDPOINTS,
    ENDPOINTS,
    SESSION_PATH_ENDPOINTS,
    db_state,
    endpoint_id,
    error_of,
    fill,
    send,
    valid_body,
)

MISSING_SESSION = "s_" + "0" * 32
MISSING_ASK = "q_" + "0" * 32


def test_endpoint_table_covers_the_spec_endpoints():
    routes = {(method, route.replace("<ref:", "<").replace("<str:", "<")) for method, route, _ in ENDPOINTS}
    assert routes >= {
        ("POST", "sessions"),
        ("GET", "sessions/<session_id>"),
        ("GET", "sessions/<session_id>/tools"),
        ("POST", "sessions/<session_id>/messages"),
        ("POST", "sessions/<session_id>/recover"),
        ("POST", "recover"),
        ("POST", "tools/call"),
        ("GET", "asks"),
        ("GET", "asks/<ask_id>"),
        ("GET", "asks/<ask_id>/wait"),
        ("POST", "asks/<ask_id>/wait"),
        ("POST", "asks/<ask_id>/cancel"),
        ("GET", "events"),
        ("POST", "events/ack"),
    }


# ------------------------------------------------------------------------------ authentication


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=endpoint_id)
def test_missing_authorization_is_401_not_authenticated(anon, ids, present_session, endpoint):
    method, route, name = endpoint
    before = db_state()
    response = send(anon, method, fill(route, **ids), valid_body(name, session=present_session))
    code, message = error_of(response, 401)
    assert code == "not_authenticated"
    assert "Bearer" in message
    assert response["WWW-Authenticate"] == "Bearer"
    assert db_state() == before


BAD_HEADERS = {
    "basic_scheme": "Basic YWdlbnQ6a2V5",
    "token_scheme": "Token abc",
    "bearer_without_key": "Bearer",
    "bearer_two_words": "Bearer abc def",
    "unknown_key": "Bearer ak_not-a-real-key",
    "non_ascii_key": "Bearer clé",
}


@pytest.mark.parametrize("header", BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=endpoint_id)
def test_bad_authorization_is_401_invalid_key(anon, ids, present_session, endpoint, header):
    method, route, name = endpoint
    anon.credentials(HTTP_AUTHORIZATION=header)
    before = db_state()
    response = send(anon, method, fill(route, **ids), valid_body(name, session=present_session))
    code, _ = error_of(response, 401)
    assert code == "invalid_key"
    assert db_state() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=endpoint_id)
def test_deactivated_agent_is_401_agent_inactive(api, agent, ids, present_session, endpoint):
    method, route, name = endpoint
    Agent.objects.filter(pk=agent.pk).update(is_active=False)
    before = db_state()
    response = send(api, method, fill(route, **ids), valid_body(name, session=present_session))
    code, message = error_of(response, 401)
    assert code == "agent_inactive"
    assert "deactivated" in message
    assert db_state() == before


# ------------------------------------------------------------------------------ request bodies

MALFORMED = {
    "truncated": b'{"key": ',
    "single_quotes": b"{'key': 'x'}",
    "trailing_comma": b'{"key": "x",}',
    "not_utf8": b"\xff\xfe\x00",
    "nan": b'{"wait": NaN}',
    "bare_word": b"hello",
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS, ids=endpoint_id)
def test_malformed_json_body_is_400_malformed_json(api, ids, endpoint, raw):
    method, route, _ = endpoint
    before = db_state()
    code, message = error_of(send(api, method, fill(route, **ids), raw=raw), 400)
    assert code == "malformed_json"
    assert "JSON" in message
    assert db_state() == before


NOT_OBJECTS = {"array": [], "list_of_object": [{"key": "x"}], "number": 1, "string": "x", "null": None, "true": True}


@pytest.mark.parametrize("value", NOT_OBJECTS.values(), ids=NOT_OBJECTS.keys())
@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS, ids=endpoint_id)
def test_json_body_that_is_not_an_object_is_400(api, ids, endpoint, value):
    method, route, _ = endpoint
    before = db_state()
    code, message = error_of(send(api, method, fill(route, **ids), raw=json.dumps(value).encode()), 400)
    assert code == "invalid_input"
    assert "must be a JSON object" in message
    assert db_state() == before


@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS, ids=endpoint_id)
def test_lone_surrogate_escape_is_400_malformed_json(api, ids, present_session, endpoint):
    method, route, name = endpoint
    body = json.dumps({**valid_body(name, session=present_session), "key": "\ud800"})  # ensure_ascii: "\\ud800"
    before = db_state()
    code, message = error_of(send(api, method, fill(route, **ids), raw=body.encode()), 400)
    assert code == "malformed_json"
    assert "surrogate" in message
    assert db_state() == before


@pytest.mark.parametrize("depth", [100, 5000], ids=["deep", "deeper_than_the_parser"])
@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS, ids=endpoint_id)
def test_absurdly_nested_json_is_400_malformed_json(api, ids, endpoint, depth):
    method, route, _ = endpoint
    raw = ('{"x": ' + "[" * depth + "]" * depth + "}").encode()
    before = db_state()
    code, message = error_of(send(api, method, fill(route, **ids), raw=raw), 400)
    assert code == "malformed_json"
    assert "nested" in message
    assert db_state() == before


def test_surrogate_in_tool_arguments_is_400_not_500(api, present_session):
    questions = copy.deepcopy(QUESTIONS)
    questions[0]["header"] = "\udc00"
    body = {"session": present_session.id, "name": "ask_user_questions", "arguments": {"questions": questions}}
    before = db_state()
    code, message = error_of(send(api, "POST", "/api/v1/tools/call", raw=json.dumps(body).encode()), 400)
    assert code == "malformed_json"
    assert "body.arguments.questions[0].header" in message
    assert db_state() == before


# (endpoint name, body, field the message must name)
WRONG_TYPES = [
    ("session-upsert", {"key": 5, "platform": "web"}, "key"),
    ("session-upsert", {"key": True, "platform": "web"}, "key"),
    ("session-upsert", {"platform": "web"}, "key"),
    ("session-upsert", {"key": "", "platform": "web"}, "key"),
    ("session-upsert", {"key": "   ", "platform": "web"}, "key"),
    ("session-upsert", {"key": None, "platform": "web"}, "key"),
    ("session-upsert", {"key": "k" * 501, "platform": "web"}, "key"),
    ("session-upsert", {"key": " " + "k" * 500, "platform": "web"}, "key"),  # length counts what was sent
    ("session-upsert", {"key": "web/x", "platform": "sms"}, "platform"),
    ("session-upsert", {"key": "web/x", "platform": 5}, "platform"),
    ("session-upsert", {"key": "web/x", "platform": "web", "chat_type": "dm"}, "chat_type"),
    ("session-upsert", {"key": "web/x", "platform": "web", "user_id": 5}, "user_id"),
    ("session-upsert", {"key": "web/x", "platform": "web", "web_user": ["alice"]}, "web_user"),
    ("session-upsert", {"key": "web/x", "platform": "web", "parent": 5}, "parent"),
    ("session-messages", {"sender_id": 5}, "sender_id"),
    ("session-messages", {"sender_id": {"id": "x"}}, "sender_id"),
    ("tool-call", {"wait": "x"}, "wait"),
    ("tool-call", {"wait": "5"}, "wait"),
    ("tool-call", {"wait": True}, "wait"),
    ("tool-call", {"wait": -1}, "wait"),
    ("tool-call", {"wait": 61}, "wait"),
    ("tool-call", {"wait": 1.5}, "wait"),
    ("tool-call", {"session": 5}, "session"),
    ("tool-call", {"session": None}, "session"),
    ("tool-call", {"name": 5}, "name"),
    ("tool-call", {"name": ["ask_user_questions"]}, "name"),
    ("tool-call", {"name": "n" * 65}, "name"),
    ("session-progress", {"status": "running", "detail_url": "ftp://files.example/a"}, "detail_url"),
    ("session-progress", {"status": "running", "detail_url": "https://ci.example/run 42"}, "detail_url"),
    ("session-progress", {"status": "running", "detail_url": " https://ci.example/run/42"}, "detail_url"),
    ("session-progress", {"status": "running", "detail_url": "https://"}, "detail_url"),
    ("tool-call", {"call_id": 5}, "call_id"),
    ("tool-call", {"call_id": ""}, "call_id"),
    ("tool-call", {"sender_id": []}, "sender_id"),
    ("tool-call", {"timeout_seconds": "x"}, "timeout_seconds"),
    ("ask-cancel", {"reason": "bogus"}, "reason"),
    ("ask-cancel", {"reason": "by_operator"}, "reason"),
    ("ask-cancel", {"reason": 5}, "reason"),
    ("POST ask-wait", {"timeout": "5"}, "timeout"),
    ("POST ask-wait", {"timeout": 61}, "timeout"),
    ("POST ask-wait", {"timeout": True}, "timeout"),
    ("events-ack", {"upto": "1"}, "upto"),
    ("events-ack", {"upto": -1}, "upto"),
    ("events-ack", {"upto": 1.5}, "upto"),
    ("events-ack", {"upto": None}, "upto"),
    ("events-ack", {"upto": 2**63}, "upto"),
]
MISSING_FIELDS = [("tool-call", field) for field in ("session", "name", "arguments")] + [("events-ack", "upto")]


def _endpoint(name: str) -> tuple[str, str, str]:
    """The endpoint of a URL name ("ask-wait": its first method; "POST ask-wait": that method)."""
    method, _, name = name.rpartition(" ")
    return next(endpoint for endpoint in ENDPOINTS if endpoint[2] == name and method in ("", endpoint[0]))


def _body_for(name: str, session: Session, override: dict) -> dict:
    body = valid_body(name, session=session)
    if name == "session-upsert":  # the override is the whole body
        return override
    return {**body, **override}


@pytest.mark.parametrize(
    "name,override,field", WRONG_TYPES, ids=[f"{n}-{f}-{json.dumps(o)[:40]}" for n, o, f in WRONG_TYPES]
)
def test_wrong_field_value_is_400_invalid_input_naming_the_field(api, ids, present_session, name, override, field):
    method, route, _ = _endpoint(name)
    before = db_state()
    response = send(api, method, fill(route, **ids), _body_for(name, present_session, override))
    code, message = error_of(response, 400)
    assert code == "invalid_input"
    assert field in message
    assert db_state() == before


@pytest.mark.parametrize("name,field", MISSING_FIELDS, ids=[f"{n}-{f}" for n, f in MISSING_FIELDS])
def test_missing_required_field_is_400_naming_the_field(api, ids, present_session, name, field):
    method, route, _ = _endpoint(name)
    body = valid_body(name, session=present_session)
    del body[field]
    before = db_state()
    code, message = error_of(send(api, method, fill(route, **ids), body), 400)
    assert code == "invalid_input"
    assert message == f"{field}: This field is required."
    assert db_state() == before


@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS, ids=endpoint_id)
def test_unknown_body_field_is_400_naming_the_field(api, ids, present_session, endpoint):
    method, route, name = endpoint
    body = {**valid_body(name, session=present_session), "colour_typo": 1}
    before = db_state()
    response = send(api, method, fill(route, **ids), body)
    code, message = error_of(response, 400)
    assert code == "invalid_input"
    assert "colour_typo: unknown field" in message
    assert json.loads(response.content)["error"]["fields"] == {"colour_typo": [message.split(": ", 1)[1]]}
    assert db_state() == before


@pytest.mark.parametrize("endpoint", BODY_ENDPOINTS, ids=endpoint_id)
def test_unsupported_content_type_is_415_in_the_error_shape(api, ids, endpoint):
    method, route, _ = endpoint
    before = db_state()
    response = send(api, method, fill(route, **ids), raw=b"key=x", content_type="application/x-www-form-urlencoded")
    code, _ = error_of(response, 415)
    assert code == "unsupported_media_type"
    assert db_state() == before


@pytest.mark.parametrize("timeout", [0, -1, 13 * 24 * 3600 + 1, 10**30, "60", 2.5, True])
def test_tool_call_timeout_seconds_out_of_range_is_400(api, present_session, timeout):
    body = {**valid_body("tool-call", session=present_session), "timeout_seconds": timeout}
    before = db_state()
    code, message = error_of(send(api, "POST", "/api/v1/tools/call", body), 400)
    assert code == "invalid_input"
    assert "timeout_seconds" in message
    assert db_state() == before


# ------------------------------------------------------------------------------ query parameters

BAD_QUERIES = [
    ("events", {"after": "-1"}, "after"),
    ("events", {"after": "x"}, "after"),
    ("events", {"after": "1.5"}, "after"),
    ("events", {"wait": "61"}, "wait"),
    ("events", {"wait": "-1"}, "wait"),
    ("events", {"limit": "0"}, "limit"),
    ("events", {"limit": "501"}, "limit"),
    ("events", {"since": "1"}, "since"),
    ("ask-list", {"status": "bogus"}, "status"),
    ("ask-list", {"status": "PENDING"}, "status"),
    ("ask-list", {"limit": "0"}, "limit"),
    ("ask-list", {"limit": "201"}, "limit"),
    ("ask-list", {"session": "s\u0000"}, "session"),
    ("ask-list", {"sesion": "x"}, "sesion"),
    ("ask-wait", {"timeout": "61"}, "timeout"),
    ("ask-wait", {"timeout": "-1"}, "timeout"),
    ("ask-wait", {"timeout": "soon"}, "timeout"),
    ("ask-wait", {"wait": "5"}, "wait"),
    # Empty is not the default: the schema declares each parameter as one value of its type.
    ("ask-list", {"limit": ""}, "limit"),
    ("ask-list", {"status": ""}, "status"),
    ("ask-list", {"session": ""}, "session"),
    ("ask-list", {"session": "   "}, "session"),
    ("events", {"after": ""}, "after"),
    ("events", {"after": str(2**63)}, "after"),
    ("events", {"wait": ""}, "wait"),
    ("ask-wait", {"timeout": ""}, "timeout"),
]


@pytest.mark.parametrize("name,query,param", BAD_QUERIES, ids=[f"{n}-{json.dumps(q)}" for n, q, _ in BAD_QUERIES])
def test_bad_query_parameter_is_400_naming_the_parameter(api, ids, name, query, param):
    method, route, _ = _endpoint(name)
    before = db_state()
    code, message = error_of(send(api, method, fill(route, **ids), query=query), 400)
    assert code == "invalid_input"
    assert message.startswith(f"{param}: ")
    assert db_state() == before


@pytest.mark.parametrize("query", ["limit=5&limit=6", "limit=5&limit="], ids=["twice", "twice-one-empty"])
def test_query_parameter_given_twice_is_400_naming_it(api, query):
    code, message = error_of(api.get(f"/api/v1/asks?{query}"), 400)
    assert code == "invalid_input"
    assert message == "limit: given 2 times; give it once"


def test_empty_query_parameter_says_what_to_do(api):
    code, message = error_of(api.get("/api/v1/events?limit="), 400)
    assert code == "invalid_input"
    assert message == "limit: empty; give a value, or leave the parameter out for its default"


def test_many_query_parameters_get_a_json_400(api):
    query = {f"p{i}": "1" for i in range(1100)}
    code, _ = error_of(send(api, "GET", "/api/v1/events", query=query), 400)
    assert code == "bad_request"


def test_unknown_format_override_gets_a_json_error(api):
    code, message = error_of(send(api, "GET", "/api/v1/events", query={"format": "xml"}), 404)
    assert code == "not_found"
    assert "format" in message


# ------------------------------------------------------------------------------ unknown objects and paths


@pytest.mark.parametrize("missing", [MISSING_SESSION, "no-such-key", "s_%00"], ids=["id", "key", "nul"])
@pytest.mark.parametrize("endpoint", SESSION_PATH_ENDPOINTS, ids=endpoint_id)
def test_unknown_session_in_path_is_404_not_found(api, pending_ask, endpoint, missing):
    method, route, _ = endpoint
    before = db_state()
    code, _ = error_of(send(api, method, fill(route, session_id=missing), {}), 404)
    assert code == "not_found"
    assert db_state() == before


@pytest.mark.parametrize("missing", [MISSING_ASK, "q_short", "%00"], ids=["id", "malformed", "nul"])
@pytest.mark.parametrize("endpoint", ASK_PATH_ENDPOINTS, ids=endpoint_id)
def test_unknown_ask_in_path_is_404_not_found(api, pending_ask, endpoint, missing):
    method, route, _ = endpoint
    before = db_state()
    code, _ = error_of(send(api, method, fill(route, ask_id=missing), {}), 404)
    assert code == "not_found"
    assert db_state() == before


@pytest.mark.parametrize(
    "path",
    ["/api/v1/nope", "/api/v1/sessions/", "/api/v1/asks/a/b", "/api/v1/asks/a%2Fb/wait", "/api/v1/tools/call/x"],
)
def test_unknown_api_path_is_a_json_404(api, path):
    code, message = error_of(send(api, "GET", path), 404)
    assert code == "not_found"
    assert "/api/docs/" in message


@pytest.mark.parametrize(
    "method,path", [("GET", "/api/v1/tools/call"), ("DELETE", "/api/v1/asks"), ("PUT", "/api/v1/recover")]
)
def test_wrong_method_is_405_in_the_error_shape(api, method, path):
    code, message = error_of(send(api, method, path), 405)
    assert code == "method_not_allowed"
    assert method in message


def test_tool_call_with_unknown_session_is_404(api):
    body = {"session": "web/nobody", "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    code, message = error_of(send(api, "POST", "/api/v1/tools/call", body), 404)
    assert code == "not_found"
    assert "web/nobody" in message


def test_ask_list_for_unknown_session_is_404(api):
    code, _ = error_of(send(api, "GET", "/api/v1/asks", query={"session": "web/nobody"}), 404)
    assert code == "not_found"


def test_session_upsert_with_unknown_parent_creates_nothing(api):
    before = db_state()
    code, message = error_of(
        send(api, "POST", "/api/v1/sessions", {"key": "web/child", "platform": "web", "parent": "web/nobody"}), 404
    )
    assert code == "not_found"
    assert "web/nobody" in message
    assert db_state() == before


# ------------------------------------------------------------------------------ another agent's objects


def _same_as_missing(other_response, other_ref: str, missing_response, missing_ref: str) -> None:
    """Another agent's object reads exactly like one that does not exist."""
    assert other_response.status_code == missing_response.status_code == 404
    other = json.loads(other_response.content)
    missing = json.loads(missing_response.content)
    assert json.dumps(other).replace(other_ref, "REF") == json.dumps(missing).replace(missing_ref, "REF")


@pytest.mark.parametrize("ref", ["id", "key"])
@pytest.mark.parametrize("endpoint", SESSION_PATH_ENDPOINTS, ids=endpoint_id)
def test_other_agents_session_in_path_reads_as_missing(api, pending_ask, other_ask, other_session, endpoint, ref):
    method, route, _ = endpoint
    other_ref = other_session.id if ref == "id" else other_session.key
    missing_ref = MISSING_SESSION if ref == "id" else "b-secret-sessioz"
    before = db_state()
    other_response = send(api, method, fill(route, session_id=other_ref), {})
    missing_response = send(api, method, fill(route, session_id=missing_ref), {})
    _same_as_missing(other_response, other_ref, missing_response, missing_ref)
    assert b"Bob B." not in other_response.content and b"Secret" not in other_response.content
    assert db_state() == before


@pytest.mark.parametrize("endpoint", ASK_PATH_ENDPOINTS, ids=endpoint_id)
def test_other_agents_ask_in_path_reads_as_missing(api, pending_ask, other_ask, endpoint):
    method, route, _ = endpoint
    before = db_state()
    other_response = send(api, method, fill(route, ask_id=other_ask.id), {})
    missing_response = send(api, method, fill(route, ask_id=MISSING_ASK), {})
    _same_as_missing(other_response, other_ask.id, missing_response, MISSING_ASK)
    assert b"Secret" not in other_response.content and b"b-secret-session" not in other_response.content
    assert db_state() == before
    assert Ask.objects.get(pk=other_ask.pk).status == "pending"


@pytest.mark.parametrize("ref", ["id", "key"])
def test_tool_call_on_other_agents_session_reads_as_missing(api, other_session, ref):
    other_ref = other_session.id if ref == "id" else other_session.key
    missing_ref = MISSING_SESSION if ref == "id" else "b-secret-sessioz"
    body = {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    before = db_state()
    other_response = send(api, "POST", "/api/v1/tools/call", {**body, "session": other_ref})
    missing_response = send(api, "POST", "/api/v1/tools/call", {**body, "session": missing_ref})
    _same_as_missing(other_response, other_ref, missing_response, missing_ref)
    assert db_state() == before


def test_ask_list_of_other_agents_session_reads_as_missing(api, other_ask, other_session):
    other_response = send(api, "GET", "/api/v1/asks", query={"session": other_session.id})
    missing_response = send(api, "GET", "/api/v1/asks", query={"session": MISSING_SESSION})
    _same_as_missing(other_response, other_session.id, missing_response, MISSING_SESSION)


def test_session_upsert_with_other_agents_parent_reads_as_missing(api, other_session):
    before = db_state()
    other_response = send(
        api, "POST", "/api/v1/sessions", {"key": "web/c", "platform": "web", "parent": other_session.id}
    )
    missing_response = send(
        api, "POST", "/api/v1/sessions", {"key": "web/c", "platform": "web", "parent": MISSING_SESSION}
    )
    _same_as_missing(other_response, other_session.id, missing_response, MISSING_SESSION)
    assert db_state() == before


def test_other_agents_asks_and_events_are_not_listed(api, pending_ask, other_ask, other_agent):
    services.ask_cancel(ask=other_ask, actor="agent:agent-b")
    asks = json.loads(send(api, "GET", "/api/v1/asks").content)["asks"]
    events = json.loads(send(api, "GET", "/api/v1/events").content)["events"]
    assert [ask["id"] for ask in asks] == [pending_ask.id]
    assert events == []


def test_recover_does_not_touch_other_agents_asks(api, pending_ask, other_ask):
    assert json.loads(send(api, "POST", "/api/v1/recover").content) == {"invalidated": 1}
    assert Ask.objects.get(pk=other_ask.pk).status == "pending"


# ------------------------------------------------------------------------------ tools/call outcomes


def test_tool_call_with_unknown_tool_is_400_unknown_tool(api, present_session):
    body = {"session": present_session.id, "name": "ask_the_oracle", "arguments": {}}
    before = db_state()
    code, message = error_of(send(api, "POST", "/api/v1/tools/call", body), 400)
    assert code == "unknown_tool"
    assert "ask_the_oracle" in message and "ask_user_questions" in message
    assert db_state() == before


@pytest.fixture(params=["wechat", "dingtalk", "subagent"])
def toolless_session(request, agent, web_session, recording_surface) -> Session:
    if request.param == "subagent":
        session, _ = services.session_upsert(
            agent=agent, key="web/alice/sub", platform="web", web_user="alice", parent=web_session
        )
    else:
        session, _ = services.session_upsert(
            agent=agent, key=f"{request.param}/alice", platform=request.param, user_id="alice"
        )
    recording_surface.present.add(session.id)  # reachable: the tool itself is what is missing
    return session


def test_tool_call_of_tool_the_session_lacks_is_200_failed_not_available(api, toolless_session):
    body = {"session": toolless_session.id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    response = send(api, "POST", "/api/v1/tools/call", body)
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "failed"
    result = json.loads(data["tool_result"])
    assert result["reason"] == "not_available"
    assert isinstance(result["error"], str) and result["error"]
    assert (data["ask"]["status"], data["ask"]["reason"]) == ("failed", "not_available")


def test_tool_call_of_tool_the_session_lacks_shows_nothing(api, toolless_session, recording_surface):
    body = {"session": toolless_session.id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    send(api, "POST", "/api/v1/tools/call", body)
    assert not [call for call in recording_surface.calls if call[0] in ("deliver", "show")]


def _question(**changes) -> dict:
    question = copy.deepcopy(QUESTIONS[0])
    question.update(changes)
    return question


def _options(*labels: str) -> list[dict]:
    return [{"label": label} for label in labels]


def _without(mapping: dict, key: str) -> dict:
    return {name: value for name, value in mapping.items() if name != key}


# (case, arguments, substrings the error text must contain)
INVALID_ARGUMENTS = [
    ("zero_questions", {"questions": []}, ["arguments.questions", "non-empty"]),
    (
        "five_questions",
        {"questions": [_question(question=f"Q{i}?") for i in range(5)]},
        ["arguments.questions", "too long"],
    ),
    ("one_option", {"questions": [_question(options=_options("A"))]}, ["arguments.questions[0].options", "too short"]),
    (
        "five_options",
        {"questions": [_question(options=_options(*"ABCDE"))]},
        ["arguments.questions[0].options", "too long"],
    ),
    (
        "duplicate_labels",
        {"questions": [_question(options=_options("A", "A"))]},
        ["arguments.questions[0].options", "unique"],
    ),
    ("header_13_chars", {"questions": [_question(header="H" * 13)]}, ["arguments.questions[0].header", "too long"]),
    ("blank_header", {"questions": [_question(header="   ")]}, ["arguments.questions[0]", "blank"]),
    ("empty_label", {"questions": [_question(options=_options("", "B"))]}, ["arguments.questions[0].options[0].label"]),
    ("extra_property", {"questions": [_question()], "urgent": True}, ["arguments", "'urgent' was unexpected"]),
    (
        "extra_question_property",
        {"questions": [_question(colour="red")]},
        ["arguments.questions[0]", "'colour' was unexpected"],
    ),
    (
        "extra_option_property",
        {"questions": [_question(options=[{"label": "A", "icon": "x"}, {"label": "B"}])]},
        ["'icon' was unexpected"],
    ),
    ("missing_questions", {}, ["'questions' is a required property"]),
    (
        "missing_header",
        {"questions": [_without(_question(), "header")]},
        ["arguments.questions[0]", "'header' is a required property"],
    ),
    (
        "question_not_string",
        {"questions": [_question(question=5)]},
        ["arguments.questions[0].question", "not of type 'string'"],
    ),
    (
        "multiselect_not_boolean",
        {"questions": [_question(multiSelect="yes")]},
        ["arguments.questions[0].multiSelect", "boolean"],
    ),
    ("questions_not_array", {"questions": "Which database?"}, ["arguments.questions", "not of type 'array'"]),
    ("arguments_array", [_question()], ["arguments", "not of type 'object'"]),
    ("arguments_string", "Which database?", ["arguments", "not of type 'object'"]),
    ("arguments_null", None, ["arguments", "None is not of type 'object'"]),
]


@pytest.mark.parametrize(
    "arguments,expected", [case[1:] for case in INVALID_ARGUMENTS], ids=[case[0] for case in INVALID_ARGUMENTS]
)
def test_invalid_ask_user_questions_arguments_are_200_failed_invalid_arguments(
    api, present_session, arguments, expected
):
    body = {"session": present_session.id, "name": "ask_user_questions", "arguments": arguments}
    before = db_state()
    response = send(api, "POST", "/api/v1/tools/call", body)
    assert response.status_code == 200
    data = response.json()
    assert (data["status"], data["ask"]) == ("failed", None)
    result = json.loads(data["tool_result"])
    assert result["reason"] == "invalid_arguments"
    for text in expected:
        assert text in result["error"]
    assert db_state() == before


def test_invalid_arguments_are_reported_before_the_missing_tool(api, toolless_session):
    body = {"session": toolless_session.id, "name": "ask_user_questions", "arguments": {"questions": []}}
    response = send(api, "POST", "/api/v1/tools/call", body)
    assert json.loads(response.json()["tool_result"])["reason"] == "invalid_arguments"


def test_nul_character_in_tool_arguments_is_400_naming_where(api, present_session):
    body = {
        "session": present_session.id,
        "name": "ask_user_questions",
        "arguments": {"questions": [_question(question="Which\u0000one?")]},
    }
    before = db_state()
    code, message = error_of(send(api, "POST", "/api/v1/tools/call", body), 400)
    assert code == "malformed_json"
    assert "body.arguments.questions[0].question" in message
    assert db_state() == before


def test_tool_call_sender_id_too_long_once_case_folded_is_400(api, present_session):
    body = {**valid_body("tool-call", session=present_session), "sender_id": "ß" * 200}  # casefolds to 400 chars
    before = db_state()
    code, message = error_of(send(api, "POST", "/api/v1/tools/call", body), 400)
    assert code == "invalid_input"
    assert "sender_id" in message
    assert db_state() == before


def test_session_key_inferring_an_overlong_user_id_is_400(api):
    before = db_state()
    code, message = error_of(send(api, "POST", "/api/v1/sessions", {"key": "feishu-cli_a-private-" + "u" * 300}), 400)
    assert code == "invalid_input"
    assert "user_id" in message
    assert db_state() == before


# ------------------------------------------------------------------------------ conflicts


def test_cancel_of_answered_ask_is_409_ask_not_pending(api, pending_ask):
    assert services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="test").accepted
    before = db_state()
    code, message = error_of(send(api, "POST", f"/api/v1/asks/{pending_ask.id}/cancel", {}), 409)
    assert code == "ask_not_pending"
    assert "answered" in message
    assert db_state() == before


def test_cancel_of_cancelled_ask_is_409_and_keeps_the_first_reason(api, pending_ask):
    assert send(api, "POST", f"/api/v1/asks/{pending_ask.id}/cancel", {"reason": "pause_failed"}).status_code == 200
    code, _ = error_of(send(api, "POST", f"/api/v1/asks/{pending_ask.id}/cancel", {}), 409)
    assert code == "ask_not_pending"
    assert Ask.objects.get(pk=pending_ask.pk).reason == "pause_failed"
    assert OutboxEvent.objects.filter(ask=pending_ask).count() == 1
