"""The served OpenAPI schema is what the API sends (issue 12): for every operation, real responses
through the real ASGI application — its successes and every error status the schema documents for
it — validate against the schema fetched from /api/schema/, each error's code is one the response
documents, and every documented status really occurs. Webhook bodies are the feed's events.

The schema is OpenAPI 3.0; ``json_schema`` turns it into JSON Schema (``nullable``), and makes
every documented object closed (``additionalProperties: false``), so an undocumented key fails too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from unittest import mock

import jsonschema
import pytest
from channels.db import database_sync_to_async
from django.test import Client

from askcards import crypto, outbox, services
from askcards.models import OutboxEvent
from tests.conftest import QUESTIONS
from tests.security.edge_client import call

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = 150 * 1024 * 1024  # declared, never sent
MISSING = {"session_id": "s_" + "0" * 32, "ask_id": "q_" + "0" * 32}


# ------------------------------------------------------------------------------ the schema


def served_schema() -> dict[str, Any]:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema object as JSON Schema 2020-12."""
    if not isinstance(node, dict):
        return node
    converted = {key: value for key, value in node.items() if key != "nullable"}
    if "properties" in node:
        converted["properties"] = {name: json_schema(value) for name, value in node["properties"].items()}
        converted.setdefault("additionalProperties", False)
    if isinstance(node.get("additionalProperties"), dict):
        converted["additionalProperties"] = json_schema(node["additionalProperties"])
    if "items" in node:
        converted["items"] = json_schema(node["items"])
    for keyword in ("allOf", "anyOf", "oneOf"):
        if keyword in node:
            converted[keyword] = [json_schema(part) for part in node[keyword]]
    if node.get("nullable"):
        if "type" in converted and "enum" not in converted:
            converted["type"] = [converted["type"], "null"]
        else:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: Any) -> bool:
    return not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is not None


@dataclass
class Schema:
    document: dict[str, Any]
    seen: dict[tuple[str, str], set[int]] = field(default_factory=dict)

    def __post_init__(self):
        schemas = self.document["components"]["schemas"]
        self.components = {"schemas": {name: json_schema(value) for name, value in schemas.items()}}

    def validate(self, data: Any, openapi_schema: dict[str, Any]) -> None:
        root = {**json_schema(openapi_schema), "components": self.components}
        validator = jsonschema.Draft202012Validator(root, format_checker=FORMATS)
        problems = [f"{error.json_path}: {error.message[:200]}" for error in validator.iter_errors(data)]
        assert not problems, problems

    def component(self, name: str) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}"}

    def documented(self, method: str, template: str) -> dict[str, Any]:
        return self.document["paths"][template][method.lower()]["responses"]

    def check(self, method: str, template: str, exchange) -> None:
        """The response is documented for this operation, its body matches, an error's code is listed."""
        responses = self.documented(method, template)
        what = f"{method} {template} -> {exchange.status} {exchange.body[:300]!r}"
        assert str(exchange.status) in responses, f"undocumented status: {what}"
        assert exchange.headers["content-type"].startswith("application/json"), what
        documented = responses[str(exchange.status)]
        body = exchange.json()
        self.validate(body, documented["content"]["application/json"]["schema"])
        if exchange.status >= 400:
            assert f"`{body['error']['code']}`" in documented["description"], what
        for header in documented.get("headers", {}):  # WWW-Authenticate on a 401
            assert header.lower() in exchange.headers, f"no {header} header: {what}"
        self.seen.setdefault((method, template), set()).add(exchange.status)


@pytest.fixture
def schema() -> Schema:
    return Schema(served_schema())


# ------------------------------------------------------------------------------ the requests


@dataclass
class Request:
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    key: str | None = "agent"  # "agent": the agent's key; None: no Authorization header
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"


async def send(request: Request, agent_key: str):
    raw = request.raw
    if raw is None:
        raw = json.dumps(request.body).encode() if request.body is not None else b""
    headers = list(request.headers)
    if request.key is not None:
        headers.append(("authorization", f"Bearer {agent_key if request.key == 'agent' else request.key}"))
    if request.method != "GET":
        headers.append(("content-type", request.content_type))
    if raw and not any(name == "content-length" for name, _ in headers):
        headers.append(("content-length", str(len(raw))))
    return await call(request.method, request.path, headers=headers, body=raw)


def successes(operation: str, w: dict[str, Any]) -> list[Request]:
    """Each operation's successful requests, over the kinds of objects it returns."""
    session, pending, answered, feishu = w["session"], w["pending"], w["answered"], w["feishu_session"]
    call_body = {"session": session.id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    return {
        "session_upsert": [Request("POST", "/api/v1/sessions", {"key": "web/new", "platform": "web"})] * 2,
        "session_read": [Request("GET", f"/api/v1/sessions/{s.id}") for s in (session, feishu, w["subagent"])],
        "session_tools": [Request("GET", f"/api/v1/sessions/{s.id}/tools") for s in (session, w["subagent"])],
        "session_message": [Request("POST", f"/api/v1/sessions/{session.id}/messages", {"sender_id": "alice"})],
        "session_progress": [Request("PUT", f"/api/v1/sessions/{feishu.id}/progress", {"status": "running"})],
        "session_recover": [Request("POST", f"/api/v1/sessions/{session.id}/recover")],
        "agent_recover": [Request("POST", "/api/v1/recover", {})],
        "tool_call": [
            Request("POST", "/api/v1/tools/call", call_body),
            Request("POST", "/api/v1/tools/call", {**call_body, "arguments": {"questions": []}}),  # no ask
            Request("POST", "/api/v1/tools/call", {**call_body, "session": feishu.id}),  # no surface
        ],
        "ask_list": [Request("GET", "/api/v1/asks"), Request("GET", "/api/v1/asks?status=answered")],
        "ask_read": [Request("GET", f"/api/v1/asks/{ask.id}") for ask in (pending, answered, w["collection"])],
        "ask_wait": [Request("GET", f"/api/v1/asks/{ask.id}/wait?timeout=0") for ask in (pending, answered)],
        "ask_wait_deliver": [Request("POST", f"/api/v1/asks/{a.id}/wait", {"timeout": 0}) for a in (pending, answered)],
        "ask_cancel": [Request("POST", f"/api/v1/asks/{pending.id}/cancel", {"reason": "by_agent"})],
        "events_read": [Request("GET", "/api/v1/events"), Request("GET", "/api/v1/events?after=1&wait=0")],
        "events_ack": [Request("POST", "/api/v1/events/ack", {"upto": 1})],
    }[operation]


def errors(operation: str, method: str, template: str, path: str, w: dict[str, Any], *, queried: bool) -> list[Request]:
    """Requests that fail, for every error status an operation may answer (``queried``: it takes
    query parameters)."""
    bodied = method != "GET"
    body = {} if bodied else None
    unknown = template.format(**MISSING) if "{" in template else f"{path}?format=xml"
    failing = [
        Request(method, path, body, headers=(("content-length", "abc"),)),  # 400 bad_request (the edge)
        Request(method, path, body, key=None),  # 401 not_authenticated
        Request(method, path, body, key="ak_not-a-key"),  # 401 invalid_key
        Request(method, unknown, body),  # 404
        Request(method, path, body, headers=(("accept", "text/html"),)),  # 406
        Request(method, path, headers=(("content-length", str(HUGE)),)),  # 413 (the edge)
    ]
    if bodied:
        failing += [
            Request(method, path, raw=b'{"x": '),  # 400 malformed_json
            Request(method, path, {"colour_typo": 1}),  # 400 invalid_input
            Request(method, path, raw=b"x=1", content_type="application/x-www-form-urlencoded"),  # 415
        ]
    if queried:
        failing.append(Request(method, f"{path}?colour_typo=1"))  # 400 invalid_input
    call_body = {"session": w["session"].id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    failing += {
        "session_upsert": [
            Request(method, path, {"key": "web/carol", "platform": "web", "web_user": "carol"}),  # 403 web user
            Request(method, path, {"key": "feishu-cli_nope-private-ou_a", "bot": "cli_nope"}),  # 403 bot
        ],
        "tool_call": [
            Request(method, path, {**call_body, "name": "no_such_tool"}),  # 400 unknown_tool
            Request(method, path, {**call_body, "session": w["revoked_session"].id}),  # 403 web user
            Request(method, path, {**call_body, "session": w["revoked_bot_session"].id}),  # 403 bot
        ],
        "session_progress": [  # 403 bot: a new card through a revoked bot
            Request(method, f"/api/v1/sessions/{w['revoked_bot_session'].id}/progress", {"status": "running"}),
        ],
        "ask_cancel": [Request(method, f"/api/v1/asks/{w['cancelled'].id}/cancel", {})],  # 409
    }.get(operation, [])
    return failing


def quota_request(operation: str, path: str, w: dict[str, Any]) -> Request | None:
    """A request of ``operation`` over one of the agent's quotas (429), for those that have one."""
    call_body = {"session": w["session"].id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    return {
        "tool_call": Request("POST", path, call_body),
        "ask_wait": Request("GET", f"{path}?timeout=1"),
        "ask_wait_deliver": Request("POST", path, {"timeout": 1}),
        "events_read": Request("GET", f"{path}?wait=1"),
    }.get(operation)


# ------------------------------------------------------------------------------ the tests


@pytest.fixture
def everything(agent, world, dingtalk_collection) -> dict[str, Any]:
    """The API tests' world, a DingTalk collection, and sessions whose web user or bot was revoked."""
    revoked, _ = services.session_upsert(agent=agent, key="web/bob", platform="web", web_user="bob")
    services.agent_revoke(agent=agent, username="bob", actor="test")
    bot = services.bot_add(platform="feishu", app_id="cli_gone", app_secret="secret", base_url="http://127.0.0.1:9")
    services.agent_bot_grant(agent=agent, bot=bot, actor="test")
    revoked_bot, _ = services.session_upsert(agent=agent, key="feishu-cli_gone-private-ou_alice", bot=bot)
    services.agent_bot_revoke(agent=agent, bot=bot, actor="test")
    return {**world, "collection": dingtalk_collection, "revoked_session": revoked, "revoked_bot_session": revoked_bot}


OPERATIONS = [
    ("session_upsert", "POST", "/api/v1/sessions"),
    ("session_read", "GET", "/api/v1/sessions/{session_id}"),
    ("session_tools", "GET", "/api/v1/sessions/{session_id}/tools"),
    ("session_message", "POST", "/api/v1/sessions/{session_id}/messages"),
    ("session_progress", "PUT", "/api/v1/sessions/{session_id}/progress"),
    ("session_recover", "POST", "/api/v1/sessions/{session_id}/recover"),
    ("agent_recover", "POST", "/api/v1/recover"),
    ("tool_call", "POST", "/api/v1/tools/call"),
    ("ask_list", "GET", "/api/v1/asks"),
    ("ask_read", "GET", "/api/v1/asks/{ask_id}"),
    ("ask_wait", "GET", "/api/v1/asks/{ask_id}/wait"),
    ("ask_wait_deliver", "POST", "/api/v1/asks/{ask_id}/wait"),
    ("ask_cancel", "POST", "/api/v1/asks/{ask_id}/cancel"),
    ("events_read", "GET", "/api/v1/events"),
    ("events_ack", "POST", "/api/v1/events/ack"),
]


def test_every_served_operation_is_checked_here():
    document = served_schema()
    served = {
        (operation["operationId"], method.upper(), path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert served == set(OPERATIONS)


@pytest.mark.asyncio
@pytest.mark.parametrize("operation,method,template", OPERATIONS, ids=[operation for operation, _, _ in OPERATIONS])
async def test_real_responses_match_the_served_schema(schema, agent_and_key, everything, operation, method, template):
    w = everything
    path = template.format(session_id=w["session"].id, ask_id=w["pending"].id)
    parameters = schema.document["paths"][template][method.lower()].get("parameters", [])
    queried = any(parameter["in"] == "query" for parameter in parameters)
    for request in errors(operation, method, template, path, w, queried=queried):
        exchange = await send(request, agent_and_key[1])
        assert exchange.status >= 400, (request, exchange.body[:300])
        schema.check(method, template, exchange)
    for request in successes(operation, w):
        exchange = await send(request, agent_and_key[1])
        assert exchange.status < 300, (request, exchange.body[:300])
        schema.check(method, template, exchange)
    over_quota = quota_request(operation, path, w)
    if over_quota is not None:
        # The agent at its quotas: pending asks 1 (it has more), parked waits 1 (one parked here).
        await database_sync_to_async(services.agent_quotas_set)(
            agent=agent_and_key[0], actor="test", pending_asks=1, parked_waits=1)
        with services.parked_wait(agent_and_key[0].pk):
            exchange = await send(over_quota, agent_and_key[1])
        assert exchange.status == 429 and exchange.headers["retry-after"], (over_quota, exchange.body[:300])
        schema.check(method, template, exchange)
    documented = {int(status) for status in schema.documented(method, template)}
    assert schema.seen[(method, template)] == documented


def test_webhook_bodies_are_the_feed_events_and_match_the_schema(schema, api, agent, world, dingtalk_collection):
    feed = api.get("/api/v1/events").json()["events"]
    assert {event["type"] for event in feed} == {"ask.closed", "ask.progress", "session.cancel_requested"}
    agent.webhook_url, agent.webhook_secret = "http://127.0.0.1:9/hook", crypto.new_webhook_secret()
    agent.save()
    services.events_retry(event_ids=list(OutboxEvent.objects.values_list("pk", flat=True)))  # due now
    with mock.patch("askcards.outbox.netguard.post", autospec=True, return_value=200) as post:
        assert outbox.deliver_due(limit=100) == len(feed)
    bodies = sorted((json.loads(c.kwargs["body"]) for c in post.call_args_list), key=lambda body: body["seq"])
    assert bodies == feed
    for body in bodies:
        schema.validate(body, schema.component("EventOutput"))


def test_unknown_api_path_error_matches_the_error_component(schema, api):
    response = api.get("/api/v1/nope")
    assert response.status_code == 404
    schema.validate(response.json(), schema.component("ErrorOutput"))
