"""The host as one more surface (``host=ask``, 2026-07-28 tasks): an open ask's task asks the MCP
client's own user through a form elicitation (``input_required``), and their response, sent back
with ``tasks/update``, races the panel and the cards. Through the real ASGI app."""
from __future__ import annotations

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from askcards import services
from askcards.models import Ask, AskEvent
from tests.conftest import QUESTIONS, answer_for
from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

TASKS = "io.modelcontextprotocol/tasks"
HOSTED = "session=web/alice&platform=web&web_user=alice&host=ask"
WITH_FORMS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}, "elicitation": {"form": {}}}}
NO_FORMS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}
ASK = {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}


async def modern(key, method, params=None, *, meta=WITH_FORMS, query=HOSTED) -> wire.Answer:
    return await wire.rpc(key, method, {**(params or {}), "_meta": meta}, era=wire.MODERN, query=query)


async def _task(key, query=HOSTED) -> str:
    return (await modern(key, "tools/call", ASK, query=query)).result["taskId"]


def _ask(ask_id) -> Ask:
    return Ask.objects.get(pk=ask_id)


async def _respond(key, task_id, response) -> dict:
    key_name = f"askcards-answer-{task_id}"
    return (await modern(key, "tasks/update", {"taskId": task_id, "inputResponses": {key_name: response}})).result


async def test_the_task_asks_the_hosts_user_and_their_answer_wins(agent_and_key, present_session, recording_surface):
    key = agent_and_key[1]
    task_id = await _task(key)
    asked = (await modern(key, "tasks/get", {"taskId": task_id})).result
    assert asked["status"] == "input_required"
    request = asked["inputRequests"][f"askcards-answer-{task_id}"]
    assert request["method"] == "elicitation/create"
    schema = request["params"]["requestedSchema"]
    assert request["params"]["mode"] == "form" and schema["required"] == ["q1"]
    assert [o["const"] for o in schema["properties"]["q1"]["oneOf"]] == [o["label"] for o in QUESTIONS[0]["options"]]
    assert schema["properties"]["q1"]["description"] == QUESTIONS[0]["question"]
    assert "q1_other" in schema["properties"] and "q1_other" not in schema["required"]
    again = (await modern(key, "tasks/get", {"taskId": task_id})).result
    assert again["inputRequests"] == asked["inputRequests"]  # the same request while it is outstanding

    ack = await _respond(key, task_id, {"action": "accept", "content": {"q1": "SQLite", "q1_other": " 先用着 "}})
    assert ack["resultType"] == "complete"
    ask = await database_sync_to_async(_ask)(task_id)
    assert (ask.status, ask.reason) == ("answered", "submitted")
    # As on the panel, a single select's own words replace its option.
    assert ask.result["answers"] == [{"question": QUESTIONS[0]["question"], "selectedLabels": [], "customInput": "先用着"}]
    closed = await database_sync_to_async(lambda: AskEvent.objects.get(ask_id=task_id, kind=AskEvent.Kind.CLOSED))()
    assert closed.surface == "host"
    assert ("withdraw", task_id, "answered") in recording_surface.calls  # the other surfaces close
    completed = (await modern(key, "tasks/get", {"taskId": task_id})).result
    assert completed["status"] == "completed" and completed["result"]["isError"] is False


@pytest.mark.parametrize("action,reason,text", [("decline", "declined", "用户拒绝回答"),
                                                ("cancel", "dismissed", "用户关闭了提问，未作答")])
async def test_declining_or_dismissing_the_hosts_form_is_the_persons_answer(action, reason, text, agent_and_key,
                                                                           present_session, recording_surface):
    key = agent_and_key[1]
    task_id = await _task(key)
    await _respond(key, task_id, {"action": action})
    ask = await database_sync_to_async(_ask)(task_id)
    assert (ask.status, ask.reason) == ("cancelled", reason)  # declined and dismissed, told apart
    closed = await database_sync_to_async(lambda: AskEvent.objects.get(ask_id=task_id, kind=AskEvent.Kind.CLOSED))()
    assert closed.surface == "host"
    assert ("withdraw", task_id, "cancelled") in recording_surface.calls
    got = (await modern(key, "tasks/get", {"taskId": task_id})).result
    assert got["status"] == "cancelled" and text in got["statusMessage"]


async def test_an_answer_on_the_panel_first_wins_over_the_hosts(agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = await _task(key)
    await database_sync_to_async(services.ask_answer)(ask_id=task_id, respondent_id="alice", answers=answer_for(),
                                                      surface="web")
    late = (await modern(key, "tasks/get", {"taskId": task_id})).result
    assert late["status"] == "completed" and "inputRequests" not in late  # nothing asked of the host any more
    await _respond(key, task_id, {"action": "accept", "content": {"q1": "SQLite"}})
    ask = await database_sync_to_async(_ask)(task_id)
    assert ask.result["answers"][0]["selectedLabels"] == ["PostgreSQL"]


@pytest.mark.parametrize("content", [{"q1": "MongoDB"}, {"q1": ["PostgreSQL", "SQLite"]}, {"q1_other": 7}, {}, None])
async def test_content_that_does_not_answer_the_form_is_ignored(content, agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = await _task(key)
    await _respond(key, task_id, {"action": "accept", "content": content})
    assert (await database_sync_to_async(_ask)(task_id)).status == Ask.Status.PENDING
    assert (await modern(key, "tasks/get", {"taskId": task_id})).result["status"] == "input_required"


@pytest.mark.parametrize("query,meta", [
    ("session=web/alice&platform=web&web_user=alice", WITH_FORMS),  # the URL did not opt in
    (HOSTED, NO_FORMS),  # the client shows no forms
])
async def test_without_the_opt_in_or_forms_the_host_is_asked_nothing(query, meta, agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = await _task(key, query)
    working = (await modern(key, "tasks/get", {"taskId": task_id}, meta=meta, query=query)).result
    assert working["status"] == "working" and "inputRequests" not in working
    await wire.rpc(key, "tasks/update", {"taskId": task_id, "_meta": meta, "inputResponses": {
        f"askcards-answer-{task_id}": {"action": "accept", "content": {"q1": "SQLite"}}}}, era=wire.MODERN, query=query)
    if query != HOSTED:  # without host=ask the host's response answers nothing
        assert (await database_sync_to_async(_ask)(task_id)).status == Ask.Status.PENDING


async def test_a_bad_host_parameter_is_a_clear_error(agent_and_key, present_session):
    answer = await modern(agent_and_key[1], "tools/call", ASK, query=HOSTED.replace("host=ask", "host=yes"))
    assert answer.error["code"] == -32602 and "host must be ask" in answer.error["message"]
    assert await database_sync_to_async(Ask.objects.count)() == 0


# ------------------------------------------------------------------------ a blocking call (MRTR)

PLAIN_FORMS = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}  # {} means form


async def _first_round(key) -> dict:
    answer = await modern(key, "tools/call", ASK, meta=PLAIN_FORMS)
    return answer.result


async def _retry(key, state, responses) -> wire.Answer:
    return await modern(key, "tools/call", {**ASK, "requestState": state, "inputResponses": responses}, meta=PLAIN_FORMS)


async def test_a_blocking_call_asks_the_host_then_returns_its_answer(agent_and_key, present_session, recording_surface):
    key = agent_and_key[1]
    first = await _first_round(key)
    assert first["resultType"] == "input_required" and isinstance(first["requestState"], str)
    (name, request), = first["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["requestedSchema"]["required"] == ["q1"]
    ask_id = name.removeprefix("askcards-answer-")
    assert (await database_sync_to_async(_ask)(ask_id)).status == Ask.Status.PENDING  # on the other surfaces too
    assert ("show", ask_id, "pending") in recording_surface.calls

    result = (await _retry(key, first["requestState"], {name: {"action": "accept", "content": {"q1": "SQLite"}}})).result
    assert result["resultType"] == "complete" and result["isError"] is False
    assert result["structuredContent"]["ask"]["id"] == ask_id
    assert '"SQLite"' in result["content"][0]["text"]
    ask = await database_sync_to_async(_ask)(ask_id)
    assert ask.status == Ask.Status.ANSWERED and ask.result_delivered_at is not None


async def test_a_blocking_call_answered_elsewhere_first_returns_that_answer(agent_and_key, present_session):
    key = agent_and_key[1]
    first = await _first_round(key)
    (name, _), = first["inputRequests"].items()
    ask_id = name.removeprefix("askcards-answer-")
    await database_sync_to_async(services.ask_answer)(ask_id=ask_id, respondent_id="alice", answers=answer_for(),
                                                      surface="web")
    result = (await _retry(key, first["requestState"], {name: {"action": "decline"}})).result
    assert result["isError"] is False and '"PostgreSQL"' in result["content"][0]["text"]
    assert (await database_sync_to_async(_ask)(ask_id)).status == Ask.Status.ANSWERED


async def test_a_declined_blocking_call_returns_the_persons_refusal(agent_and_key, present_session):
    key = agent_and_key[1]
    first = await _first_round(key)
    (name, _), = first["inputRequests"].items()
    result = (await _retry(key, first["requestState"], {name: {"action": "decline"}})).result
    assert result["isError"] is True and "用户拒绝回答" in result["content"][0]["text"]
    assert result["structuredContent"]["ask"]["reason"] == "declined"


@pytest.mark.parametrize("forge", ["garbage", "other-agent", "tampered"])
async def test_a_request_state_not_signed_for_this_agent_is_refused(forge, agent_and_key, present_session):
    key = agent_and_key[1]
    first = await _first_round(key)
    (name, _), = first["inputRequests"].items()
    ask_id = name.removeprefix("askcards-answer-")
    state = first["requestState"]
    if forge == "garbage":
        state = "not-a-state"
    elif forge == "tampered":
        state = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
    else:
        _, key = await database_sync_to_async(services.agent_create)(name="agent-b", web_users=["alice"])
    answer = await _retry(key, state, {name: {"action": "accept", "content": {"q1": "SQLite"}}})
    assert answer.error["code"] == -32602 and "requestState" in answer.error["message"]
    assert (await database_sync_to_async(_ask)(ask_id)).status == Ask.Status.PENDING


async def test_between_the_two_rounds_the_ask_holds_no_lease_and_a_slow_answer_still_counts(agent_and_key,
                                                                                           present_session):
    """No request is open while the host's user fills the form in, so nothing tells them from a
    client that went away: the ask is not withdrawn (caller_gone) however long they take."""
    key = agent_and_key[1]
    first = await _first_round(key)
    (name, _), = first["inputRequests"].items()
    ask_id = name.removeprefix("askcards-answer-")
    assert (await database_sync_to_async(_ask)(ask_id)).waiter_until is None
    later = timezone.now() + timedelta(minutes=10)  # long past any grace period
    assert await database_sync_to_async(services.waits_lapsed)(now=later) == 0  # the sweep leaves it alone
    result = (await _retry(key, first["requestState"], {name: {"action": "accept", "content": {"q1": "SQLite"}}})).result
    assert result["isError"] is False and '"SQLite"' in result["content"][0]["text"]
