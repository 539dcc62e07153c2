"""Tasks on the 2026-07-28 wire: the ``io.modelcontextprotocol/tasks`` extension, through the
real ASGI app, as hand-built requests (the wire's exact field names and error codes matter)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from askcards import services
from askcards.models import Ask
from askcards.worker import Worker
from tests.conftest import QUESTIONS, answer_for
from tests.security import mcp_wire as wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

TASKS = "io.modelcontextprotocol/tasks"
DECLARED = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}
ASK = {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
TIMEOUT = "io.askcards/timeout_seconds"
TIMEOUT_TEXT = "用户未在规定时间内作答"  # what the model reads when nobody answered in time


async def modern(key, method, params=None, *, declared=True, **options) -> wire.Answer:
    params = dict(params or {})
    if declared:
        params["_meta"] = {**params.get("_meta", {}), **DECLARED}
    return await wire.rpc(key, method, params, era=wire.MODERN, **options)


def _ask(**filters) -> Ask:
    return Ask.objects.get(**filters)


async def test_the_extension_is_advertised_in_its_place(agent_and_key):
    capabilities = (await modern(agent_and_key[1], "server/discover")).result["capabilities"]
    assert capabilities["extensions"] == {TASKS: {}, "io.modelcontextprotocol/ui": {}}  # tasks, and MCP Apps
    assert "tasks" not in capabilities  # the 2025-11-25 slot is not this revision's


async def test_a_declaring_call_gets_its_task_once_the_ask_is_stored_then_its_result_inline(agent_and_key, present_session):
    key = agent_and_key[1]
    created = (await modern(key, "tools/call", ASK)).result
    assert created["resultType"] == "task" and "task" not in created  # flat: Result & Task
    assert created["status"] == "working" and "alice" in created["statusMessage"]
    assert isinstance(created["ttlMs"], int) and created["ttlMs"] > 0 and created["pollIntervalMs"] == 5000
    assert not {"ttl", "pollInterval", "result", "error", "inputRequests"} & set(created)
    ask = await database_sync_to_async(_ask)(pk=created["taskId"])  # committed before the answer
    assert ask.status == Ask.Status.PENDING

    working = (await modern(key, "tasks/get", {"taskId": ask.id})).result
    assert (working["resultType"], working["status"], working["taskId"]) == ("complete", "working", ask.id)
    assert "result" not in working

    await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice", answers=answer_for(), surface="web")
    assert (await database_sync_to_async(_ask)(pk=ask.id)).result_delivered_at is None  # nobody has read it yet
    completed = (await modern(key, "tasks/get", {"taskId": ask.id})).result
    assert completed["status"] == "completed"
    result = completed["result"]
    assert result["isError"] is False and result["structuredContent"]["tool_result"] == result["content"][0]["text"]
    assert answer_for()[0]["selectedLabels"] == ["PostgreSQL"] and "PostgreSQL" in result["content"][0]["text"]
    assert "io.modelcontextprotocol/related-task" not in result["_meta"]
    assert (await database_sync_to_async(_ask)(pk=ask.id)).result_delivered_at is not None  # the read took it


async def test_a_task_past_its_deadline_completes_with_an_error_inline(agent_and_key, present_session, settings):
    """As on 2025-11-25 (test_mcp_serve's test_task_past_its_deadline_completes_with_an_error):
    once the worker's deadline sweep expires the ask, its task is ``completed`` and ``tasks/get``
    inlines the ``isError`` tool result saying why. The task's durations are those of
    askcards.mcp.results and docs/agents/mcp.md: ``ttlMs`` runs to the deadline plus the answer
    retention period, ``pollIntervalMs`` is 5 s."""
    key = agent_and_key[1]
    created = (await modern(key, "tools/call", {**ASK, "_meta": {TIMEOUT: 120}})).result
    ask = await database_sync_to_async(_ask)(pk=created["taskId"])
    retention_ms = settings.ASKCARDS_ANSWER_RETENTION_DAYS * 86400 * 1000

    def ttl_ms(row: Ask) -> int:  # integer milliseconds from creation to the deadline, plus retention
        return round((row.deadline - row.created_at).total_seconds() * 1000) + retention_ms

    assert abs((ask.deadline - ask.created_at).total_seconds() - 120) < 5  # the call's own timeout
    assert isinstance(created["ttlMs"], int) and abs(created["ttlMs"] - ttl_ms(ask)) <= 1
    assert created["pollIntervalMs"] == 5000

    await database_sync_to_async(Ask.objects.filter(pk=ask.id).update)(deadline=timezone.now() - timedelta(seconds=1))
    assert await database_sync_to_async(Worker().deadlines)() == 1
    expired = await database_sync_to_async(_ask)(pk=ask.id)
    assert (expired.status, expired.reason) == (Ask.Status.EXPIRED, "timeout")

    ended = (await modern(key, "tasks/get", {"taskId": ask.id})).result
    assert (ended["resultType"], ended["taskId"], ended["status"]) == ("complete", ask.id, "completed")
    assert TIMEOUT_TEXT in ended["statusMessage"] and ended["pollIntervalMs"] == 5000
    assert abs(ended["ttlMs"] - ttl_ms(expired)) <= 1  # from the deadline the ask now has
    result = ended["result"]
    assert result["isError"] is True and TIMEOUT_TEXT in result["content"][0]["text"]
    assert result["structuredContent"]["status"] == "expired"
    assert result["_meta"] == {"io.askcards/ask_id": ask.id}  # no related-task: the task id is at the root
    again = (await modern(key, "tasks/get", {"taskId": ask.id})).result  # ended: it stays so
    assert again["status"] == "completed" and again["result"]["isError"] is True


async def test_a_call_that_does_not_declare_the_extension_gets_no_task(agent_and_key, present_session):
    """Without the extension in the request's own capabilities the call is the blocking one: an
    immediate refusal shows it (no ask, a tool error, no task)."""
    answer = await modern(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": []}},
                          declared=False)
    assert answer.result["resultType"] == "complete" and answer.result["isError"] is True
    assert "taskId" not in answer.result


async def test_a_refused_declaring_call_is_a_tool_error_not_a_task(agent_and_key, present_session):
    answer = await modern(agent_and_key[1], "tools/call", {"name": "ask_user_questions", "arguments": {"questions": []}})
    assert answer.result["resultType"] == "complete" and answer.result["isError"] is True
    assert await database_sync_to_async(Ask.objects.count)() == 0


@pytest.mark.parametrize("method,params", [
    ("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {}),
])
async def test_task_methods_need_the_extension_declared(method, params, agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = (await modern(key, "tools/call", ASK)).result["taskId"]
    answer = await modern(key, method, {"taskId": task_id, **params}, declared=False)
    assert answer.error["code"] == -32021
    assert answer.error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert (await database_sync_to_async(_ask)(pk=task_id)).status == Ask.Status.PENDING


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
async def test_the_core_task_methods_of_2025_are_gone_from_this_wire(method, agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = (await modern(key, "tools/call", ASK)).result["taskId"]
    answer = await modern(key, method, {"taskId": task_id} if method == "tasks/result" else {})
    assert answer.error["code"] == -32601


async def test_tasks_update_is_not_a_2025_method(agent_and_key):
    answer = await wire.rpc(agent_and_key[1], "tasks/update", {"taskId": "q_" + "0" * 32, "inputResponses": {}})
    assert answer.error["code"] == -32601


async def test_cancel_is_an_acknowledgement_and_cancels_the_ask(agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = (await modern(key, "tools/call", ASK)).result["taskId"]
    ack = (await modern(key, "tasks/cancel", {"taskId": task_id})).result
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
    ask = await database_sync_to_async(_ask)(pk=task_id)
    assert (ask.status, ask.reason) == ("cancelled", "by_agent")
    cancelled = (await modern(key, "tasks/get", {"taskId": task_id})).result
    assert cancelled["status"] == "cancelled" and "result" not in cancelled
    again = (await modern(key, "tasks/cancel", {"taskId": task_id})).result  # ended: still acknowledged
    assert again["resultType"] == "complete"


async def test_update_of_a_task_that_asks_nothing_is_acknowledged_and_changes_nothing(agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = (await modern(key, "tools/call", ASK)).result["taskId"]
    responses = {"never-issued": {"action": "accept", "content": {"x": "y"}}}
    ack = (await modern(key, "tasks/update", {"taskId": task_id, "inputResponses": responses})).result
    assert ack["resultType"] == "complete"
    assert (await database_sync_to_async(_ask)(pk=task_id)).status == Ask.Status.PENDING
    bad = await modern(key, "tasks/update", {"taskId": task_id, "inputResponses": ["not", "an", "object"]})
    assert bad.error["code"] == -32602


@pytest.mark.parametrize("method,params", [
    ("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {}),
])
async def test_another_agents_task_is_not_found_and_untouched(method, params, agent_and_key, present_session):
    key = agent_and_key[1]
    task_id = (await modern(key, "tools/call", ASK)).result["taskId"]
    _, other_key = await database_sync_to_async(services.agent_create)(name="agent-b", web_users=["alice"])
    answer = await modern(other_key, method, {"taskId": task_id, **params})
    assert answer.error["code"] == -32602 and task_id in answer.error["message"]
    assert (await database_sync_to_async(_ask)(pk=task_id)).status == Ask.Status.PENDING
    unknown = await modern(key, method, {"taskId": "q_" + "0" * 32, **params})
    assert unknown.error["code"] == -32602
