"""Helpers for the agent API tests: the endpoint table (read from askcards/api/urls.py, so a new
endpoint is covered by the generic auth and body tests at once), request helpers, error-shape
checks and a database snapshot that proves a rejected request changed nothing."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from rest_framework.test import APIClient

from askcards import services
from askcards.api import urls as api_urls
from askcards.models import Ask, OutboxEvent, Respondent, Session
from tests.conftest import QUESTIONS, answer_for, grant_bot

PREFIX = "/api/v1/"
METHODS = ("get", "post", "put", "patch", "delete")
PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


def api_endpoints() -> list[tuple[str, str, str]]:
    """(METHOD, route, url name) for every DRF view in askcards/api/urls.py."""
    endpoints = []
    for pattern in api_urls.urlpatterns:
        view_class = getattr(pattern.callback, "view_class", None)
        if view_class is None:  # the JSON 404 catch-all
            continue
        for method in METHODS:
            if hasattr(view_class, method):
                endpoints.append((method.upper(), str(pattern.pattern), pattern.name))
    return endpoints


ENDPOINTS = api_endpoints()
BODY_METHODS = {"POST", "PUT", "PATCH"}
BODY_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if endpoint[0] in BODY_METHODS]
GET_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if endpoint[0] == "GET"]
# Endpoints whose path names an object, by the kind of id in the path.
SESSION_PATH_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if "session_id>" in endpoint[1]]
ASK_PATH_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if "ask_id>" in endpoint[1]]
# Endpoints whose GET query is validated (the others take no query parameters).
QUERY_ENDPOINTS = {"ask-list", "ask-wait", "events"}


def endpoint_id(endpoint: tuple[str, str, str]) -> str:
    return f"{endpoint[0]} {endpoint[1]}"


def fill(route: str, **ids: str) -> str:
    """The URL of a route with its path parameters filled in (unknown parameters get 'x')."""
    return PREFIX + PARAM.sub(lambda match: ids.get(match.group(1), "x"), route)


def send(
    client: APIClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    query: dict[str, str] | None = None,
    content_type: str = "application/json",
):
    """One request; ``body`` is sent as JSON, ``raw`` as is (no body when both are None)."""
    if raw is None and body is not None:
        raw = json.dumps(body, ensure_ascii=False).encode()
    if query:
        path = f"{path}?{urlencode(query)}"
    return client.generic(method, path, raw or b"", content_type=content_type)


def error_of(response, status: int | None = None) -> tuple[str, str]:
    """Asserts the API error shape ({"error": {"code": str, "message": str}}) and returns (code, message)."""
    if status is not None:
        assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    body = json.loads(response.content)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict), body
    assert isinstance(error.get("code"), str) and error["code"], body
    assert isinstance(error.get("message"), str) and error["message"], body
    return error["code"], error["message"]


def valid_body(name: str, *, session: Session | None = None) -> Any:
    """A body each endpoint would accept, so a rejection is about what the test changed."""
    if name == "session-upsert":
        return {"key": "web/bob", "platform": "web", "web_user": "bob"}
    if name == "tool-call":
        return {
            "session": session.id if session else "x",
            "name": "ask_user_questions",
            "arguments": {"questions": QUESTIONS},
        }
    if name == "events-ack":
        return {"upto": 0}
    return {}


def db_state() -> dict[str, Any]:
    """Everything a rejected request must leave as it was."""
    return {
        "asks": sorted(Ask.objects.values_list("id", "status", "reason", "closed_at", "result_delivered_at")),
        "sessions": sorted(
            Session.objects.values_list(
                "id",
                "key",
                "platform",
                "chat_type",
                "chat_id",
                "user_id",
                "user_name",
                "web_user",
                "parent_id",
                "bot_id",
            )
        ),
        "outbox": sorted(OutboxEvent.objects.values_list("id", "seq", "delivered_at")),
        "respondents": sorted(Respondent.objects.values_list("id", "status")),
    }


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


@pytest.fixture
def ids(pending_ask) -> dict[str, str]:
    """Real ids of this agent (a present web session with a pending ask)."""
    return {"session_id": pending_ask.session_id, "ask_id": pending_ask.id}


@pytest.fixture
def other_session(other_agent, recording_surface) -> Session:
    session, _ = services.session_upsert(
        agent=other_agent, key="b-secret-session", platform="web", web_user="bob", user_id="bob", user_name="Bob B."
    )
    recording_surface.present.add(session.id)
    return session


@pytest.fixture
def other_ask(other_agent, other_session) -> Ask:
    questions = [dict(QUESTIONS[0], header="SecretHdr", question="Secret question of agent b?")]
    outcome = services.tool_call(
        agent=other_agent, session=other_session, name="ask_user_questions", arguments={"questions": questions}
    )
    assert outcome.status == "pending"
    return outcome.ask


@pytest.fixture
def feishu_session(agent) -> Session:
    """A Feishu p2p session whose bot is never called: progress reports only store the card."""
    bot = services.bot_add(platform="feishu", app_id="cli_api", app_secret="secret", base_url="http://127.0.0.1:9")
    grant_bot(agent, bot)
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_api-private-ou_alice", bot=bot)
    return session


@pytest.fixture
def world(agent, pending_ask, feishu_session) -> dict[str, Any]:
    """One of everything the API shows: a pending ask; an answered one (event 1) and a cancelled
    one (event 2) whose results are not yet delivered; a Feishu session whose person cancelled its
    progress card (event 3, session.cancel_requested); a sub-agent session."""
    session = pending_ask.session
    arguments = {"questions": QUESTIONS}
    answered, cancelled = (
        services.tool_call(agent=agent, session=session, name="ask_user_questions", arguments=arguments).ask
        for _ in range(2)
    )
    assert services.ask_answer(ask_id=answered.id, answers=answer_for(custom="MySQL"), surface="test").accepted
    assert services.ask_cancel(ask=cancelled, actor="agent:agent-a")
    card = services.progress_put(session=feishu_session, status="running", title="Release", content="Tests are green")
    assert services.session_cancel_request(card=card, actor="feishu:ou_alice")
    subagent, _ = services.session_upsert(agent=agent, key="web/alice/sub", platform="web", parent=session)
    return {
        "session": session,
        "feishu_session": feishu_session,
        "subagent": subagent,
        "pending": pending_ask,
        "answered": answered,
        "cancelled": cancelled,
        "last_seq": 3,
    }


@pytest.fixture
def dingtalk_collection(agent, settings):
    """A targeted DingTalk collection (fields, a group target) one of three people answered: an
    ask.progress event. Its cards go to a fake DingTalk server."""
    from django.core.cache import cache

    from tests.dingtalk.integration import FIELDS, click, create, make_bot, make_session
    from tests.fakes.dingtalk import FakeDingTalk

    settings.ASKCARDS_SURFACES = [*settings.ASKCARDS_SURFACES, "askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    cache.clear()  # no DingTalk token of another test's fake server
    with FakeDingTalk() as fake:
        bot = make_bot(fake)
        session = make_session(agent, bot)
        target = {"type": "group", "id": "cid_team", "respondentUserIds": ["staff_b", "staff_c"]}
        outcome, _ = create(agent, session, {"fields": FIELDS, "title": "午餐", "target": target, "timeoutMinutes": 30})
        click(bot, outcome.ask, "staff_b", form={"dish": {"index": 0, "value": "a"}})
        yield outcome.ask
    cache.clear()
