"""MCP across processes: two ``manage.py serve`` processes on one PostgreSQL database and one Redis.

Process A runs the worker, process B runs with ``--no-worker``; both have ``REDIS_URL`` (the
bus) and ``DATABASE_URL``. The agent talks MCP with the official SDK client; alice
answers on her panel socket on process B (signed in through B's ``/login/``). Each test proves
that something started on one process is finished by what happens on the other:

- a task created through A is completed by an answer on B and read (``tasks/get``,
  ``tasks/result``) through both, while a ``tasks/result`` parked on A is woken by that answer;
- a blocking ``tools/call`` parked on A is woken by an answer on B and returns it;
- ``notifications/cancelled`` posted to B cancels the ask of a call parked on A (``by_agent``),
  and that call returns;
- the host's answer to a call parked on A (``host=ask``, 2025-11-25), posted to B, wakes it.

Every ask gets a deadline far beyond the test's bounds, so only a wake crossing processes can end
a parked request in time.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time

import httpx2
import mcp_types as types
import pytest

from tests import serving
from tests.mcp import support
from tests.mcp.test_host_elicitation import host_client

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

REDIS_DB = 12  # tests/scale/conftest.py: redis_url (test_redis_wake uses 11)
ASK_TIMEOUT = 600  # seconds: an ask's deadline; a parked request could only end this early through a wake
WAKE_WITHIN = 5  # seconds from an event on one process to the parked request's response on the other
TASKS_VERSION = "2025-11-25"
ANSWER = {"answers": [{"question": "Which database should we use?", "selectedLabels": ["SQLite"], "customInput": None}]}


@pytest.fixture(scope="module")
def cluster(redis_env, tmp_path_factory):
    """Processes A (with the worker) and B (``--no-worker``), the agent's key, alice's cookie on B."""
    seed = serving.shell_json(redis_env, support.SEED)
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(serving.serve(redis_env, "--no-migrate", log_dir=tmp_path_factory.mktemp("serve-a")))
        b = stack.enter_context(serving.serve(redis_env, "--no-migrate", "--no-worker",
                                              log_dir=tmp_path_factory.mktemp("serve-b")))
        yield {"a": a, "b": b, "key": seed["key"], "cookie_b": support.login_cookie(b)}


def web_session(name: str) -> str:
    return f"session=scale-{name}&platform=web&web_user=alice"


def call_params(*, task: bool = False) -> dict:
    params = {
        "name": "ask_user_questions",
        "arguments": {"questions": support.QUESTIONS},
        "_meta": {"io.askcards/timeout_seconds": ASK_TIMEOUT},
    }
    if task:
        params["task"] = {}
    return params


def parked_signal():
    """A progress callback for a blocking request, and a bounded wait for its first call.

    A parked request sends its first progress notification right after its process has
    subscribed to its keys (the ask's and, for tools/call, its cancel key), so from then on a wake
    from another process reaches it; no sleep guesses when that is."""
    parked = asyncio.Event()
    messages: list[str] = []

    async def on_progress(progress, total, message):
        messages.append(message)
        parked.set()

    async def is_parked():
        async with asyncio.timeout(support.TIMEOUT):
            await parked.wait()
        assert "waiting for alice to answer on web" in messages[0], messages

    return on_progress, is_parked


async def shown_on_panel(panel: support.Panel, ask_id: str) -> dict:
    """The panel's next message showing ``ask_id`` (skipping any other ask it may show)."""
    while True:
        shown = await panel.next_ask()
        if shown["requestId"] == ask_id:
            return shown


def test_task_created_on_a_is_completed_by_an_answer_on_b_and_read_on_both(cluster):
    """tools/call with ``task`` through A; tasks/result parked on A; alice answers on B's panel;
    the parked tasks/result returns the answer, and tasks/get + tasks/result agree on both."""
    query = web_session("task")

    async def scenario():
        async with (
            support.Panel.open(cluster["b"], cluster["cookie_b"]) as panel,
            support.client(cluster["a"], cluster["key"], query) as on_a,
            support.client(cluster["b"], cluster["key"], query) as on_b,
        ):
            assert on_a.protocol_version == on_b.protocol_version == TASKS_VERSION
            created = await on_a.session._dispatcher.send_raw_request("tools/call", call_params(task=True), {})
            task_id = created["task"]["taskId"]
            assert created["task"]["status"] == "working"

            seen_on_b = await on_b.session._dispatcher.send_raw_request("tasks/get", {"taskId": task_id}, {})
            assert (seen_on_b["taskId"], seen_on_b["status"]) == (task_id, "working")
            assert "waiting for alice to answer on web" in seen_on_b["statusMessage"]

            on_progress, is_parked = parked_signal()
            parked = asyncio.create_task(
                on_a.session._dispatcher.send_raw_request("tasks/result", {"taskId": task_id}, {"on_progress": on_progress})
            )
            await shown_on_panel(panel, task_id)  # the ask made on A reached B's panel (Redis)
            await is_parked()
            assert not parked.done(), "tasks/result returned before the ask was answered"
            answered_at = time.monotonic()
            assert (await panel.answer(task_id, labels=["SQLite"]))["ok"] is True
            async with asyncio.timeout(support.TIMEOUT):
                result_a_parked = await parked
            woken_after = time.monotonic() - answered_at

            got = {
                "a": await on_a.session._dispatcher.send_raw_request("tasks/get", {"taskId": task_id}, {}),
                "b": await on_b.session._dispatcher.send_raw_request("tasks/get", {"taskId": task_id}, {}),
            }
            results = {
                "a": await on_a.session._dispatcher.send_raw_request("tasks/result", {"taskId": task_id}, {}),
                "b": await on_b.session._dispatcher.send_raw_request("tasks/result", {"taskId": task_id}, {}),
            }
        return task_id, result_a_parked, woken_after, got, results

    task_id, parked_result, woken_after, got, results = asyncio.run(scenario())
    assert woken_after < WAKE_WITHIN, f"tasks/result on A returned {woken_after:.1f} s after the answer on B"
    for where, task in got.items():
        assert (task["taskId"], task["status"], task["statusMessage"]) == (task_id, "completed", "answered (submitted)"), where
    for where, result in {"a (parked)": parked_result, **results}.items():
        assert result["isError"] is False, where
        assert json.loads(result["content"][0]["text"]) == ANSWER, where
        assert result["structuredContent"]["ask"]["status"] == "answered", where
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}, where


def test_blocking_call_parked_on_a_is_woken_by_an_answer_on_b(cluster):
    """The SDK's own ``call_tool`` on A stays open; the answer on B's panel reaches it through the
    Redis bus within seconds (its deadline is ten minutes away)."""
    query = web_session("blocking")

    async def scenario():
        async with (
            support.Panel.open(cluster["b"], cluster["cookie_b"]) as panel,
            support.client(cluster["a"], cluster["key"], query) as on_a,
        ):
            on_progress, is_parked = parked_signal()
            call = asyncio.create_task(
                on_a.call_tool("ask_user_questions", {"questions": support.QUESTIONS}, progress_callback=on_progress,
                               meta={"io.askcards/timeout_seconds": ASK_TIMEOUT})
            )
            shown = await panel.next_ask()
            await is_parked()
            assert not call.done(), "the blocking call returned before the ask was answered"
            answered_at = time.monotonic()
            assert (await panel.answer(shown["requestId"], labels=["SQLite"]))["ok"] is True
            async with asyncio.timeout(support.TIMEOUT):
                result = await call
            return shown, result, time.monotonic() - answered_at

    shown, result, woken_after = asyncio.run(scenario())
    assert woken_after < WAKE_WITHIN, f"the call on A returned {woken_after:.1f} s after the answer on B"
    assert result.is_error is False
    assert json.loads(result.content[0].text) == ANSWER
    assert result.structured_content["status"] == "answered"
    assert result.structured_content["ask"]["id"] == shown["requestId"]


def test_cancel_notification_sent_to_b_cancels_the_call_parked_on_a(cluster, pg_db):
    """``notifications/cancelled`` for a call parked on A, posted to B, cancels its ask by_agent.

    How the cancel reaches B: the SDK client sends ``notifications/cancelled`` only to the URL it
    is connected to (A), so the notification is posted to B by hand (httpx2, same Bearer key, same
    ``/mcp?<query>``, ``MCP-Protocol-Version: 2025-11-25``), as a second client of the same agent
    and session would. To know the id of the call being cancelled, the call itself is sent through
    the SDK client's own dispatcher with a caller-chosen ``request_id`` (a string that cannot
    collide with the dispatcher's integer ids), rather than guessing the integer the SDK mints.
    The cancel is posted once the call's first progress notification has arrived (``parked_signal``):
    a cancel sent before A has subscribed to the call's cancel key would reach nobody.
    """
    query = web_session("cancel")
    request_id = f"scale-cancel-{secrets.token_hex(4)}"

    async def scenario():
        on_progress, is_parked = parked_signal()
        async with (
            support.Panel.open(cluster["b"], cluster["cookie_b"]) as panel,
            support.client(cluster["a"], cluster["key"], query) as on_a,
            support.http_client(cluster["key"], **{"MCP-Protocol-Version": TASKS_VERSION}) as raw_b,
        ):
            call = asyncio.create_task(
                on_a.session._dispatcher.send_raw_request(
                    "tools/call", call_params(), {"request_id": request_id, "on_progress": on_progress}
                )
            )
            shown = await panel.next_ask()
            await is_parked()
            assert not call.done(), "the blocking call returned before it was cancelled"
            cancelled_at = time.monotonic()
            posted = await raw_b.post(
                f"{cluster['b']}/mcp?{query}",
                json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}},
                headers={"Accept": "application/json, text/event-stream"},
            )
            async with asyncio.timeout(support.TIMEOUT):
                result = await call
            return shown, posted, result, time.monotonic() - cancelled_at

    shown, posted, result, returned_after = asyncio.run(scenario())
    assert posted.status_code == 202, posted.text
    assert returned_after < WAKE_WITHIN, f"the call on A returned {returned_after:.1f} s after the cancel on B"
    assert result["isError"] is True
    assert result["structuredContent"]["status"] == "cancelled"
    assert result["structuredContent"]["ask"]["id"] == shown["requestId"]
    assert result["structuredContent"]["ask"]["reason"] == "by_agent"
    assert pg_db.query("SELECT status, reason FROM askcards_ask WHERE id = %s", shown["requestId"]) == [("cancelled", "by_agent")]


def test_the_hosts_answer_posted_to_b_wakes_the_call_parked_on_a(cluster, pg_db):
    """The host surface on 2025-11-25 (``host=ask``): the call parked on A sends
    ``elicitation/create`` on its stream; the client's response is posted to B (a load balancer's
    choice), which keeps nothing of the call: B verifies the response's signed id, answers the
    ask, and the call on A wakes with that answer through Redis."""
    query = web_session("host") + "&host=ask"

    async def scenario():
        async with support.Panel.open(cluster["b"], cluster["cookie_b"]) as panel:
            async def on_form(ctx, params):
                await panel.next_ask()  # on the panel too, as always
                return types.ElicitResult(action="accept", content={"q1": "SQLite"})

            async with host_client(cluster["a"], cluster["key"], query, on_form,
                                   responses_to=cluster["b"]) as (mcp, seen):
                result = await asyncio.wait_for(
                    mcp.call_tool("ask_user_questions", {"questions": support.QUESTIONS},
                                  meta={"io.askcards/timeout_seconds": ASK_TIMEOUT}),
                    support.TIMEOUT)
                return result, await seen.first(), seen.urls[0]

    result, (status, _), posted_to = asyncio.run(scenario())
    assert (status, posted_to.port) == (202, httpx2.URL(cluster["b"]).port)
    assert result.is_error is False and json.loads(result.content[0].text) == ANSWER
    ask_id = result.structured_content["ask"]["id"]
    assert pg_db.query("SELECT status, reason FROM askcards_ask WHERE id = %s", ask_id) == [("answered", "submitted")]
    assert pg_db.query("SELECT surface FROM askcards_respondent WHERE ask_id = %s", ask_id) == [("host",)]
