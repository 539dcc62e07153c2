"""The agent API's happy paths (SPEC §4, §7): what an agent runtime relies on.

The sync test client runs views directly, so long-poll parameters (``wait``, ``timeout``) return
the current state at once here; waiting through the real ASGI app is tested in tests/test_longpoll.py.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest
from rest_framework.test import APIClient

from askcards import services
from askcards.models import Ask, OutboxEvent, Session
from askcards.tools import ask_user_questions
from tests.conftest import QUESTIONS, answer_for

from .conftest import ENDPOINTS, error_of, send

ASK_FIELDS = {
    "id", "session", "tool", "status", "reason", "title", "questions", "target",
    "respondents", "surfaces", "deadline", "created_at", "closed_at", "result",
}  # fmt: skip


def _call(api, session, **extra):
    body = {"session": session.id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, **extra}
    return send(api, "POST", "/api/v1/tools/call", body)


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


# ------------------------------------------------------------------------------ sessions


def test_session_upsert_creates_with_201_and_returns_id_and_tools(api):
    response = send(
        api, "POST", "/api/v1/sessions", {"key": "web/bob", "platform": "web", "web_user": "bob", "user_id": "bob"}
    )
    assert response.status_code == 201
    data = response.json()
    assert re.fullmatch(r"s_[0-9a-f]{32}", data["id"])
    assert (data["key"], data["platform"], data["chat_type"], data["web_user"], data["user_id"]) == (
        "web/bob",
        "web",
        "p2p",
        "bob",
        "bob",
    )
    assert [tool["name"] for tool in data["tools"]] == ["ask_user_questions"]
    assert Session.objects.filter(pk=data["id"], key="web/bob").exists()


def test_session_upsert_of_existing_key_is_200_and_updates_fields(api):
    created = send(api, "POST", "/api/v1/sessions", {"key": "web/bob", "platform": "web", "user_name": "Bob"}).json()
    response = send(api, "POST", "/api/v1/sessions", {"key": "web/bob", "user_name": "Robert", "web_user": "bob"})
    assert response.status_code == 200
    data = response.json()
    assert data["id"] == created["id"]
    assert (data["user_name"], data["web_user"], data["platform"]) == ("Robert", "bob", "web")
    assert Session.objects.filter(key="web/bob").count() == 1


@pytest.mark.parametrize(
    "key,platform,chat_type,user_id",
    [
        ("feishu-cli_abc-private-ou_123", "feishu", "p2p", "ou_123"),
        ("ws/feishu-chat/oc_1", "feishu", "group", ""),
    ],
    ids=["feishu_p2p", "feishu_group"],
)
def test_session_upsert_infers_platform_from_key(api, key, platform, chat_type, user_id):
    response = send(api, "POST", "/api/v1/sessions", {"key": key})
    assert response.status_code == 201
    data = response.json()
    assert (data["platform"], data["chat_type"], data["user_id"]) == (platform, chat_type, user_id)
    assert [tool["name"] for tool in data["tools"]] == ["ask_user_questions"]


def test_session_upsert_without_inferable_platform_is_400_with_clear_message(api):
    code, message = error_of(send(api, "POST", "/api/v1/sessions", {"key": "slack/C123"}), 400)
    assert code == "invalid_input"
    assert "slack/C123" in message and "platform" in message and "feishu-<botId>-private-<userId>" in message
    assert not Session.objects.exists()


def test_session_upsert_of_same_key_by_another_agent_is_a_separate_session(api, web_session):
    _, other_key = services.agent_create(name="agent-c")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    response = send(other, "POST", "/api/v1/sessions", {"key": web_session.key, "platform": "web"})
    assert response.status_code == 201
    assert response.json()["id"] != web_session.id
    web_session.refresh_from_db()
    assert web_session.web_user == "alice"


def test_session_upsert_with_parent_makes_a_subagent_without_tools(api, web_session):
    response = send(
        api, "POST", "/api/v1/sessions", {"key": "web/alice/sub-1", "platform": "web", "parent": web_session.key}
    )
    assert response.status_code == 201
    assert (response.json()["parent"], response.json()["tools"]) == (web_session.id, [])


def test_session_read_returns_the_session(api, web_session):
    response = send(api, "GET", f"/api/v1/sessions/{web_session.id}")
    assert response.status_code == 200
    data = response.json()
    assert (data["id"], data["key"], data["platform"], data["web_user"], data["parent"]) == (
        web_session.id,
        "web/alice",
        "web",
        "alice",
        None,
    )


def test_session_tools_of_web_session_publish_ask_user_questions_schema(api, web_session):
    response = send(api, "GET", f"/api/v1/sessions/{web_session.id}/tools")
    assert response.status_code == 200
    (tool,) = response.json()
    assert tool["name"] == "ask_user_questions"
    assert tool["input_schema"] == ask_user_questions.INPUT_SCHEMA
    assert tool["description"]


@pytest.mark.parametrize("kind", ["wechat", "subagent"])
def test_session_tools_of_wechat_or_subagent_session_are_empty(api, agent, web_session, kind):
    if kind == "wechat":
        session, _ = services.session_upsert(agent=agent, key="wechat/alice", platform="wechat")
    else:
        session, _ = services.session_upsert(agent=agent, key="web/alice/sub", platform="web", parent=web_session)
    response = send(api, "GET", f"/api/v1/sessions/{session.id}/tools")
    assert (response.status_code, response.json()) == (200, [])


def test_session_message_leaves_blocking_asks_pending(api, pending_ask):
    response = send(api, "POST", f"/api/v1/sessions/{pending_ask.session_id}/messages", {"sender_id": "alice"})
    assert (response.status_code, response.json()) == (200, {"invalidated": 0})
    assert Ask.objects.get(pk=pending_ask.pk).status == "pending"


# ------------------------------------------------------------------------------ tools/call


def test_tool_call_on_present_web_session_is_pending(api, present_session):
    response = _call(api, present_session)
    assert response.status_code == 200
    data = response.json()
    assert (data["status"], data["tool_result"]) == ("pending", None)
    ask = data["ask"]
    assert set(ask) == ASK_FIELDS
    assert re.fullmatch(r"q_[0-9a-f]{32}", ask["id"])
    assert ask["session"] == {"id": present_session.id, "key": "web/alice"}
    assert (ask["tool"], ask["status"], ask["reason"], ask["title"], ask["target"]) == (
        "ask_user_questions",
        "pending",
        None,
        "Database",
        None,
    )
    assert ask["respondents"] == [{"id": "alice", "status": "pending", "answered_at": None, "surface": None}]
    assert ask["surfaces"] == ["test"]
    assert ask["questions"] == QUESTIONS
    assert (ask["closed_at"], ask["result"]) == (None, None)


def test_tool_call_delivers_the_ask_to_the_surface(api, present_session, recording_surface):
    ask_id = _call(api, present_session).json()["ask"]["id"]
    assert ("deliver", ask_id, "reserved") in recording_surface.calls


def test_tool_call_default_deadline_is_15_minutes(api, present_session):
    ask = _call(api, present_session).json()["ask"]
    assert _parse_time(ask["deadline"]) - _parse_time(ask["created_at"]) == timedelta(minutes=15)


def test_tool_call_timeout_seconds_sets_the_deadline(api, present_session):
    ask = _call(api, present_session, timeout_seconds=90).json()["ask"]
    assert _parse_time(ask["deadline"]) - _parse_time(ask["created_at"]) == timedelta(seconds=90)


def test_tool_call_sender_id_owns_the_ask(api, present_session):
    ask = _call(api, present_session, sender_id="ou_carol").json()["ask"]
    assert [respondent["id"] for respondent in ask["respondents"]] == ["ou_carol"]


def test_tool_call_by_session_key_finds_the_session(api, present_session):
    body = {"session": "web/alice", "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    response = send(api, "POST", "/api/v1/tools/call", body)
    assert response.json()["ask"]["session"]["id"] == present_session.id


def test_tool_call_with_wait_on_sync_client_returns_current_state(api, present_session):
    response = _call(api, present_session, wait=5)
    assert (response.status_code, response.json()["status"]) == (200, "pending")


def test_tool_call_without_reachable_surface_is_200_failed_no_surface(api, web_session):
    response = _call(api, web_session)
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "failed"
    assert json.loads(data["tool_result"]) == {"error": "当前通道无法向用户提问", "reason": "no_surface"}
    assert (data["ask"]["status"], data["ask"]["reason"], data["ask"]["surfaces"]) == ("failed", "no_surface", [])


def test_tool_call_with_same_call_id_returns_the_same_ask(api, present_session):
    first = _call(api, present_session, call_id="call-1").json()
    second = _call(api, present_session, call_id="call-1").json()
    assert second["ask"]["id"] == first["ask"]["id"]
    assert second["status"] == first["status"] == "pending"
    assert Ask.objects.filter(call_id="call-1").count() == 1


def test_tool_call_retry_after_the_answer_returns_the_result(api, present_session):
    ask_id = _call(api, present_session, call_id="call-1").json()["ask"]["id"]
    services.ask_answer(ask_id=ask_id, answers=answer_for(), surface="test")
    retry = _call(api, present_session, call_id="call-1").json()
    assert retry["status"] == "answered"
    assert json.loads(retry["tool_result"])["answers"][0]["selectedLabels"] == ["PostgreSQL"]


def test_tool_call_reusing_call_id_on_another_session_is_400(api, agent, present_session, recording_surface):
    other, _ = services.session_upsert(agent=agent, key="web/bob", platform="web", web_user="bob")
    recording_surface.present.add(other.id)
    first = _call(api, present_session, call_id="call-1").json()
    code, message = error_of(_call(api, other, call_id="call-1"), 400)
    assert code == "invalid_input"
    assert "call_id" in message and first["ask"]["id"] in message
    assert Ask.objects.count() == 1


# ------------------------------------------------------------------------------ asks


@pytest.fixture
def two_sessions_of_asks(api, agent, present_session, recording_surface):
    """web/alice: one pending and one cancelled ask; web/bob: one pending ask."""
    bob, _ = services.session_upsert(agent=agent, key="web/bob", platform="web", web_user="bob")
    recording_surface.present.add(bob.id)
    alice_open = _call(api, present_session).json()["ask"]["id"]
    alice_cancelled = _call(api, present_session).json()["ask"]["id"]
    send(api, "POST", f"/api/v1/asks/{alice_cancelled}/cancel")
    bob_open = _call(api, bob).json()["ask"]["id"]
    return {
        "alice": present_session,
        "bob": bob,
        "alice_open": alice_open,
        "alice_cancelled": alice_cancelled,
        "bob_open": bob_open,
    }


def _listed(api, **query) -> list[str]:
    response = send(api, "GET", "/api/v1/asks", query=query)
    assert response.status_code == 200
    return [ask["id"] for ask in response.json()["asks"]]


def test_ask_list_returns_all_asks_newest_first(api, two_sessions_of_asks):
    asks = two_sessions_of_asks
    assert _listed(api) == [asks["bob_open"], asks["alice_cancelled"], asks["alice_open"]]


@pytest.mark.parametrize("ref", ["id", "key"])
def test_ask_list_filters_by_session_id_or_key(api, two_sessions_of_asks, ref):
    alice = two_sessions_of_asks["alice"]
    session = alice.id if ref == "id" else alice.key
    assert _listed(api, session=session) == [
        two_sessions_of_asks["alice_cancelled"],
        two_sessions_of_asks["alice_open"],
    ]


def test_ask_list_filters_by_status(api, two_sessions_of_asks):
    asks = two_sessions_of_asks
    assert _listed(api, status="pending") == [asks["bob_open"], asks["alice_open"]]
    assert _listed(api, status="cancelled") == [asks["alice_cancelled"]]


def test_ask_list_filters_by_session_and_status(api, two_sessions_of_asks):
    assert _listed(api, session="web/alice", status="pending") == [two_sessions_of_asks["alice_open"]]


def test_ask_list_limit_caps_the_page(api, two_sessions_of_asks):
    assert _listed(api, limit="1") == [two_sessions_of_asks["bob_open"]]


def test_ask_list_limit_caps_a_status_filtered_page(api, two_sessions_of_asks):
    assert _listed(api, status="pending", limit="1") == [two_sessions_of_asks["bob_open"]]
    assert _listed(api, status="reserved") == []


def test_ask_read_returns_the_ask(api, pending_ask):
    response = send(api, "GET", f"/api/v1/asks/{pending_ask.id}")
    assert response.status_code == 200
    data = response.json()
    assert set(data) == ASK_FIELDS
    assert (data["id"], data["status"], data["result"]) == (pending_ask.id, "pending", None)


def test_ask_read_of_answered_ask_carries_answers_and_tool_result(api, pending_ask):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(custom="MySQL"), surface="test")
    data = send(api, "GET", f"/api/v1/asks/{pending_ask.id}").json()
    assert (data["status"], data["reason"]) == ("answered", "submitted")
    expected = [{"question": "Which database should we use?", "selectedLabels": [], "customInput": "MySQL"}]
    assert data["result"]["answers"] == expected
    assert json.loads(data["result"]["tool_result"]) == {"answers": expected}
    assert data["respondents"][0]["status"] == "submitted" and data["respondents"][0]["surface"] == "test"


def test_ask_wait_on_sync_client_returns_current_state(api, pending_ask):
    response = send(api, "GET", f"/api/v1/asks/{pending_ask.id}/wait", query={"timeout": "5"})
    assert (response.status_code, response.json()["status"]) == (200, "pending")


def test_ask_cancel_defaults_to_by_agent_with_tool_result(api, pending_ask):
    response = send(api, "POST", f"/api/v1/asks/{pending_ask.id}/cancel")
    assert response.status_code == 200
    data = response.json()
    assert (data["status"], data["reason"]) == ("cancelled", "by_agent")
    assert data["closed_at"] is not None
    assert json.loads(data["result"]["tool_result"])["reason"] == "by_agent"


def test_ask_cancel_accepts_pause_failed(api, pending_ask):
    data = send(api, "POST", f"/api/v1/asks/{pending_ask.id}/cancel", {"reason": "pause_failed"}).json()
    assert (data["status"], data["reason"]) == ("cancelled", "pause_failed")
    assert json.loads(data["result"]["tool_result"])["reason"] == "pause_failed"


def test_ask_cancel_withdraws_the_ask_from_its_surfaces(
    api, pending_ask, recording_surface, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        send(api, "POST", f"/api/v1/asks/{pending_ask.id}/cancel", {})
    assert ("withdraw", pending_ask.id, "cancelled") in recording_surface.calls


# ------------------------------------------------------------------------------ recover


def test_session_recover_invalidates_open_asks_with_restart(api, pending_ask):
    response = send(api, "POST", f"/api/v1/sessions/{pending_ask.session_id}/recover")
    assert (response.status_code, response.json()) == (200, {"invalidated": 1})
    ask = Ask.objects.get(pk=pending_ask.pk)
    assert (ask.status, ask.reason) == ("invalidated", "restart")
    assert json.loads(ask.result["tool_result"])["reason"] == "restart"


def test_session_recover_leaves_other_sessions_alone(api, two_sessions_of_asks):
    send(api, "POST", f"/api/v1/sessions/{two_sessions_of_asks['bob'].id}/recover", {})
    assert Ask.objects.get(pk=two_sessions_of_asks["alice_open"]).status == "pending"
    assert Ask.objects.get(pk=two_sessions_of_asks["bob_open"]).status == "invalidated"


def test_agent_recover_invalidates_open_asks_of_every_session(api, two_sessions_of_asks):
    response = send(api, "POST", "/api/v1/recover")
    assert (response.status_code, response.json()) == (200, {"invalidated": 2})
    statuses = dict(Ask.objects.values_list("id", "status"))
    assert statuses[two_sessions_of_asks["alice_open"]] == statuses[two_sessions_of_asks["bob_open"]] == "invalidated"
    assert statuses[two_sessions_of_asks["alice_cancelled"]] == "cancelled"


def test_agent_recover_with_nothing_open_invalidates_nothing(api, web_session):
    assert send(api, "POST", "/api/v1/recover", {}).json() == {"invalidated": 0}


# ------------------------------------------------------------------------------ events


@pytest.fixture
def closed_ask(pending_ask):
    """An ask answered on a surface: its result event waits in the outbox, not yet delivered."""
    assert services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="test").accepted
    return pending_ask


def test_events_returns_ask_closed_with_the_ask(api, closed_ask):
    response = send(api, "GET", "/api/v1/events")
    assert response.status_code == 200
    data = response.json()
    (event,) = data["events"]
    assert (event["seq"], event["type"], data["last_seq"]) == (1, "ask.closed", 1)
    assert set(event) == {"seq", "type", "created_at", "data"}
    assert (event["data"]["ask"]["id"], event["data"]["ask"]["status"]) == (closed_ask.id, "answered")
    assert json.loads(event["data"]["ask"]["result"]["tool_result"])["answers"][0]["selectedLabels"] == ["PostgreSQL"]


def test_events_read_without_after_acknowledges_nothing(api, closed_ask):
    send(api, "GET", "/api/v1/events")
    assert OutboxEvent.objects.get(seq=1).delivered_at is None
    assert Ask.objects.get(pk=closed_ask.pk).result_delivered_at is None


def test_events_after_last_seq_returns_nothing_new(api, closed_ask):
    response = send(api, "GET", "/api/v1/events", query={"after": "1"})
    assert (response.status_code, response.json()) == (200, {"events": [], "last_seq": 1})


def test_events_after_seq_acknowledges_nothing(api, closed_ask):
    send(api, "GET", "/api/v1/events", query={"after": "1"})
    assert OutboxEvent.objects.get(seq=1).delivered_at is None
    assert Ask.objects.get(pk=closed_ask.pk).result_delivered_at is None


def test_events_ack_marks_the_events_and_their_results_delivered(api, closed_ask):
    response = send(api, "POST", "/api/v1/events/ack", {"upto": 1})
    assert (response.status_code, response.json()) == (200, {"acknowledged": 1})
    event = OutboxEvent.objects.get(seq=1)
    assert (event.delivered_at is not None, event.delivered_via) == (True, "feed")
    assert Ask.objects.get(pk=closed_ask.pk).result_delivered_at is not None


def test_events_ack_leaves_later_events_undelivered(api, agent, closed_ask, present_session):
    later = services.tool_call(
        agent=agent, session=present_session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    ).ask
    services.ask_cancel(ask=later, actor="agent:agent-a")
    assert send(api, "POST", "/api/v1/events/ack", {"upto": 1}).json() == {"acknowledged": 1}
    assert OutboxEvent.objects.get(seq=2).delivered_at is None
    assert Ask.objects.get(pk=later.pk).result_delivered_at is None


def test_events_ack_again_acknowledges_nothing_more(api, closed_ask):
    send(api, "POST", "/api/v1/events/ack", {"upto": 1})
    assert send(api, "POST", "/api/v1/events/ack", {"upto": 1}).json() == {"acknowledged": 0}


def test_acknowledged_events_are_not_webhooked(api, agent, pending_ask):
    from askcards import outbox

    agent.webhook_url = "http://127.0.0.1:9/unused"
    agent.save(update_fields=["webhook_url"])
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    send(api, "POST", "/api/v1/events/ack", {"upto": 1})
    assert outbox.deliver_due() == 0


def test_events_after_returns_only_later_events(api, agent, closed_ask, present_session):
    later = services.tool_call(
        agent=agent, session=present_session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    ).ask
    services.ask_cancel(ask=later, actor="agent:agent-a")
    data = send(api, "GET", "/api/v1/events", query={"after": "1"}).json()
    assert [(event["seq"], event["data"]["ask"]["id"]) for event in data["events"]] == [(2, later.id)]
    assert data["last_seq"] == 2


def test_events_limit_pages_through_the_feed(api, agent, closed_ask, present_session):
    later = services.tool_call(
        agent=agent, session=present_session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    ).ask
    services.ask_cancel(ask=later, actor="agent:agent-a")
    first = send(api, "GET", "/api/v1/events", query={"limit": "1"}).json()
    second = send(api, "GET", "/api/v1/events", query={"after": str(first["last_seq"]), "limit": "1"}).json()
    assert [event["seq"] for event in first["events"] + second["events"]] == [1, 2]


# ------------------------------------------------------------------------------ schema and docs


def _openapi_path(route: str) -> str:
    return "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)


def test_openapi_schema_documents_every_api_path_and_method(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    documented = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    expected = {(method, _openapi_path(route)) for method, route, _ in ENDPOINTS}
    assert expected <= documented


def test_openapi_schema_declares_bearer_auth(client):
    schema = json.loads(client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    schemes = schema["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer"}.items() <= next(iter(schemes.values())).items()


def test_api_docs_page_is_html(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"swagger" in response.content.lower()


def test_failed_tool_call_result_is_not_webhooked_again(api, agent, web_session):
    """The 200 response already handed the model its result; the event stays in the feed only."""
    from askcards import outbox

    agent.webhook_url = "http://127.0.0.1:9/unused"
    agent.save(update_fields=["webhook_url"])
    body = _call(api, web_session).json()
    assert body["status"] == "failed"
    event = OutboxEvent.objects.get(ask_id=body["ask"]["id"])
    assert (event.delivered_via, outbox.deliver_due()) == ("response", 0)
    assert [e["seq"] for e in api.get("/api/v1/events?after=0").json()["events"]] == [event.seq]


def test_answer_read_through_get_stays_undelivered(api, agent, pending_ask):
    """A GET changes nothing: the ask.closed event still goes out by webhook."""
    agent.webhook_url = "http://127.0.0.1:9/unused"
    agent.save(update_fields=["webhook_url"])
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert api.get(f"/api/v1/asks/{pending_ask.id}").json()["status"] == "answered"
    assert api.get(f"/api/v1/asks/{pending_ask.id}/wait?timeout=0").json()["status"] == "answered"
    event = OutboxEvent.objects.get(ask=pending_ask)
    assert (event.delivered_at, event.next_attempt_at is not None) == (None, True)
    assert Ask.objects.get(pk=pending_ask.pk).result_delivered_at is None


def test_answer_taken_through_post_wait_is_not_webhooked_again(api, agent, pending_ask):
    from askcards import outbox

    agent.webhook_url = "http://127.0.0.1:9/unused"
    agent.save(update_fields=["webhook_url"])
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    response = send(api, "POST", f"/api/v1/asks/{pending_ask.id}/wait", {"timeout": 0})
    assert (response.status_code, response.json()["status"]) == (200, "answered")
    event = OutboxEvent.objects.get(ask=pending_ask)
    assert (event.delivered_via, outbox.deliver_due()) == ("response", 0)
    assert Ask.objects.get(pk=pending_ask.pk).result_delivered_at is not None


def test_post_wait_on_an_open_ask_returns_it_and_delivers_nothing(api, pending_ask):
    response = send(api, "POST", f"/api/v1/asks/{pending_ask.id}/wait", {"timeout": 5})
    assert (response.status_code, response.json()["status"]) == (200, "pending")
    assert Ask.objects.get(pk=pending_ask.pk).result_delivered_at is None
