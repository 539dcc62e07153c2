"""How an ask reads over MCP: as a tool result and as a task, for every way an ask can end."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from askcards import services
from askcards.mcp import results
from askcards.models import Ask
from tests.conftest import answer_for


def fresh(ask: Ask) -> Ask:
    return Ask.objects.select_related("session").prefetch_related("respondents").get(pk=ask.pk)


@pytest.mark.django_db
def test_a_pending_ask_is_a_working_task_that_says_where_it_waits(pending_ask):
    task = results.task(fresh(pending_ask))
    assert task["taskId"] == pending_ask.id
    assert task["status"] == "working"
    assert task["statusMessage"].startswith("waiting for alice to answer on test (ask q_")
    assert task["pollInterval"] == results.POLL_INTERVAL_MS
    # Readable until the deadline, and its answers for the retention period after it.
    lifetime = pending_ask.deadline - pending_ask.created_at + timedelta(days=7)
    assert task["ttl"] == int(lifetime.total_seconds() * 1000)


@pytest.mark.django_db
def test_an_answered_ask_is_a_completed_task_whose_result_is_the_answer(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, respondent_id="alice", answers=answer_for(labels=["SQLite"]), surface="web")
    ask = fresh(pending_ask)
    assert results.task(ask)["status"] == "completed"
    result = results.task_result(ask)
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"])["answers"][0]["selectedLabels"] == ["SQLite"]
    assert result["_meta"][results.RELATED_TASK_META] == {"taskId": ask.id}
    assert result["structuredContent"]["status"] == "answered"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "end, task_status, text",
    [
        (lambda ask: services.ask_expire(ask=ask, now=ask.deadline + timedelta(seconds=1)), "completed", "用户未在规定时间内作答"),
        (lambda ask: services.ask_invalidate(ask=ask, reason=Ask.Reason.RESTART), "completed", "服务已重启"),
        (lambda ask: services.ask_cancel(ask=ask, actor="agent:test"), "cancelled", "提问已取消"),
    ],
    ids=["expired", "invalidated", "cancelled"],
)
def test_an_ask_that_ended_without_an_answer_is_an_error_result_saying_why(pending_ask, end, task_status, text):
    assert end(pending_ask)
    ask = fresh(pending_ask)
    assert results.task(ask)["status"] == task_status
    assert text in results.task(ask)["statusMessage"]
    result = results.task_result(ask)
    assert result["isError"] is True
    assert text in json.loads(result["content"][0]["text"])["error"]


@pytest.mark.django_db
def test_invalid_arguments_are_an_error_result_without_an_ask(agent, web_session):
    # Invalid arguments: the call fails before any ask exists.
    outcome = services.tool_call(agent=agent, session=web_session, name="ask_user_questions", arguments={"questions": []})
    assert outcome.ask is None and outcome.status == "failed"
    call = results.tool_result(outcome.status, outcome.tool_result, None)
    assert call["isError"] is True and "参数无效" in call["content"][0]["text"]
    assert call["structuredContent"] == {"status": "failed", "ask": None, "tool_result": outcome.tool_result}


@pytest.mark.django_db
def test_a_purged_answer_still_reads_as_a_result(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, respondent_id="alice", answers=answer_for(), surface="web")
    Ask.objects.filter(pk=pending_ask.pk).update(result=None)
    result = results.task_result(fresh(pending_ask))
    assert result["isError"] is False and result["content"][0]["text"]
