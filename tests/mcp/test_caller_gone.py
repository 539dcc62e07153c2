"""No answer into a void: the ask of a blocking MCP call whose client went away is cancelled
(``caller_gone``) once the grace period passes without the client coming back for it; a re-call
with the same ``call_id`` or a task read within the grace keeps it. Through the real ASGI app."""
from __future__ import annotations

import asyncio
import time
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

CALL_ID = "io.askcards/call_id"
TASKS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


def _call(call_id: str = "call-1") -> dict:
    return {"name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "_meta": {CALL_ID: call_id}}


async def _pending() -> Ask:
    async with asyncio.timeout(10):
        while True:
            ask = await database_sync_to_async(Ask.objects.filter(status=Ask.Status.PENDING).first)()
            if ask is not None:
                return ask
            await asyncio.sleep(0.05)


async def _get(ask_id: str) -> Ask:
    return await database_sync_to_async(Ask.objects.get)(pk=ask_id)


async def _lapse(ask_id: str) -> None:
    """The grace period passes (as its seconds would)."""
    await database_sync_to_async(Ask.objects.filter(pk=ask_id).update)(waiter_until=timezone.now() - timedelta(seconds=1))


async def _sweep() -> int:
    return await database_sync_to_async(Worker().deadlines)()


async def _leave(agent_key, params, era=wire.LEGACY) -> Ask:
    """A blocking call whose client gives up while it waits (its request cancelled, as a closed
    stream cancels it), and its ask."""
    call = asyncio.create_task(wire.rpc(agent_key, "tools/call", params, era=era, timeout=30))
    ask = await _pending()
    await asyncio.sleep(0.3)  # parked
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.sleep(0.2)
    return ask


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_a_call_left_and_never_taken_back_is_cancelled_caller_gone(era, agent_and_key, present_session,
                                                                        recording_surface, settings):
    settings.ASKCARDS_MCP_CALLER_GRACE_SECONDS = 60
    ask = await _leave(agent_and_key[1], _call(), era)
    left = await _get(ask.id)
    assert left.status == Ask.Status.PENDING, "still answerable within the grace"
    grace = (left.waiter_until - timezone.now()).total_seconds()
    assert 50 < grace <= 60
    assert await _sweep() == 0  # the grace has not passed

    await _lapse(ask.id)
    assert await _sweep() == 1
    ended = await _get(ask.id)
    assert (ended.status, ended.reason) == ("cancelled", "caller_gone")
    # Every surface is told to withdraw it (the panel and cards then say so in words).
    assert ("withdraw", ask.id, "cancelled") in recording_surface.calls
    # Someone answering after that is refused: nothing is recorded as their answer.
    outcome = await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice",
                                                                answers=answer_for(), surface="web")
    assert not outcome.accepted


def _slow_to_return(monkeypatch, service: str) -> None:
    """``services.<service>`` (what makes the ask) returns a second after the ask is committed and
    shown: the call has not parked yet when the client leaves."""
    made = getattr(services, service)

    def slowly(**kwargs):
        outcome = made(**kwargs)
        time.sleep(1)
        return outcome

    monkeypatch.setattr(services, service, slowly)


async def _left_once_shown(request) -> Ask:
    """The client sends ``request`` (a coroutine) and goes away once its ask is pending; the ask."""
    call = asyncio.create_task(request)
    ask = await _pending()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    return ask


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_a_call_left_while_its_ask_is_being_made_is_cancelled_caller_gone_too(era, agent_and_key, present_session,
                                                                                   settings, monkeypatch):
    """The client goes away after the ask exists (a person may already see it) but before the call
    parked and took the lease: the ask gets the grace period all the same, and is withdrawn once
    it passes, not left open for someone to answer into a void."""
    settings.ASKCARDS_MCP_CALLER_GRACE_SECONDS = 60
    _slow_to_return(monkeypatch, "tool_call")
    ask = await _left_once_shown(wire.rpc(agent_and_key[1], "tools/call", _call(), era=era, timeout=30))
    await asyncio.sleep(1.5)
    left = await _get(ask.id)
    assert left.status == Ask.Status.PENDING and left.waiter_until is not None, "no lease: never withdrawn"
    assert 50 < (left.waiter_until - timezone.now()).total_seconds() <= 60
    await _lapse(ask.id)
    assert await _sweep() == 1
    assert ((await _get(ask.id)).status, (await _get(ask.id)).reason) == ("cancelled", "caller_gone")


@pytest.mark.parametrize("era", [wire.LEGACY, wire.MODERN])
async def test_a_permission_prompt_left_while_its_ask_is_being_made_is_withdrawn_host_gone(era, agent_and_key,
                                                                                          present_session, monkeypatch):
    """The headless permission prompt (``claude -p`` interrupted) goes away after its ask exists but
    before it parked: the ask is withdrawn at once (``host_gone``), as when it leaves while parked,
    not kept open under the host's lease for a person to answer into a void."""
    _slow_to_return(monkeypatch, "host_prompt")
    prompt = {"name": "permission_prompt",
              "arguments": {"tool_name": "Bash", "input": {"command": "git push --force"}, "tool_use_id": "toolu_01"}}
    ask = await _left_once_shown(wire.rpc(agent_and_key[1], "tools/call", prompt, era=era, timeout=30,
                                          query=wire.WEB + "&permission_prompt=1"))
    async with asyncio.timeout(10):
        while (await _get(ask.id)).is_open:
            await asyncio.sleep(0.1)
    assert ((await _get(ask.id)).status, (await _get(ask.id)).reason) == ("cancelled", "host_gone")


async def test_a_re_call_with_the_same_call_id_takes_the_ask_back_and_gets_the_answer(agent_and_key, present_session):
    key = agent_and_key[1]
    ask = await _leave(key, _call("again"))
    again = asyncio.create_task(wire.rpc(key, "tools/call", _call("again"), timeout=30))
    await asyncio.sleep(0.5)
    parked = await _get(ask.id)
    assert (parked.waiter_until - timezone.now()).total_seconds() > 80, "parked again: the full lease"
    await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice", answers=answer_for(),
                                                      surface="web")
    answer = await asyncio.wait_for(again, 10)
    assert answer.result["isError"] is False and answer.result["structuredContent"]["ask"]["id"] == ask.id
    assert (await _get(ask.id)).result_delivered_at is not None


async def test_a_task_read_within_the_grace_keeps_the_ask(agent_and_key, present_session, settings):
    settings.ASKCARDS_MCP_CALLER_GRACE_SECONDS = 60
    key = agent_and_key[1]
    ask = await _leave(key, _call("polled"))
    await database_sync_to_async(Ask.objects.filter(pk=ask.id).update)(waiter_until=timezone.now() + timedelta(seconds=5))
    polled = await wire.rpc(key, "tasks/get", {"taskId": ask.id})
    assert polled.result["status"] == "working"
    assert ((await _get(ask.id)).waiter_until - timezone.now()).total_seconds() > 50
    assert await _sweep() == 0


async def test_a_task_holds_no_lease_and_outlives_its_client(agent_and_key, present_session):
    """Tasks are read later by design: whoever made one may go away and come back."""
    key = agent_and_key[1]
    legacy = await wire.rpc(key, "tools/call", {**_call("legacy-task"), "task": {}})
    modern = await wire.rpc(key, "tools/call", {**_call("modern-task"), "_meta": {**TASKS, CALL_ID: "modern-task"}},
                            era=wire.MODERN)
    for task_id in (legacy.result["task"]["taskId"], modern.result["taskId"]):
        assert (await _get(task_id)).waiter_until is None
    assert await _sweep() == 0


async def test_an_answer_within_the_grace_is_kept_but_not_delivered(agent_and_key, present_session):
    """The person answered after the client left: the answer is recorded (the agent can still read
    it), but it has not reached the agent, so nothing says it was delivered."""
    ask = await _leave(agent_and_key[1], _call("late"))
    outcome = await database_sync_to_async(services.ask_answer)(ask_id=ask.id, respondent_id="alice",
                                                                answers=answer_for(), surface="web")
    assert outcome.accepted
    answered = await _get(ask.id)
    assert answered.status == Ask.Status.ANSWERED and answered.result_delivered_at is None
    assert await _sweep() == 0
