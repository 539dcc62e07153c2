"""MCP at ``/mcp`` end to end: the official SDK's client against a real ``manage.py serve``.

One seeded server serves the module (``served``); each test names its own session in the URL
and its own question text, so what one test leaves behind (an ask still pending on alice's
panel) never answers another's wait. Where both apply, a test runs in both eras: the initialize
handshake (``legacy``, negotiating 2025-11-25) and the stateless 2026-07-28 revision. Tasks
are in the core of 2025-11-25 and in the ``io.modelcontextprotocol/tasks`` extension on
2026-07-28 (a client declares it: ``tasks_client``).

Requests the SDK client has no typed method for (``tasks/*``, a task-augmented ``tools/call``,
an unknown method) go through the client's own dispatcher, stamped as the client stamps its own
requests (``send``). HTTP-level checks (status codes, headers, bodies the SDK would never send)
use plain HTTP.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import mcp_types as types
import pytest
import requests
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding, advertise
from mcp.shared.exceptions import MCPError

from tests import serving
from tests.mcp import support

MODES = ["legacy", "2026-07-28"]
CALL_ID = "io.askcards/call_id"
TIMEOUT_SECONDS = "io.askcards/timeout_seconds"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TIMEOUT_TEXT = "用户未在规定时间内作答"  # what the model reads when nobody answered in time
CANCELLED_TEXT = "提问已取消"
INVALID_ARGUMENTS_TEXT = "参数无效"
INVALID_PARAMS = -32602
SCENARIO_LIMIT = 60  # seconds: no scenario of this module may run longer


@dataclass(frozen=True)
class Served:
    base: str
    key: str
    other_key: str
    cookie: str  # alice's session cookie


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    with support.seeded(tmp_path_factory.mktemp("mcp-serve")) as (base, seed):
        yield Served(base, seed["key"], seed["other_key"], support.login_cookie(base))


def run(scenario) -> Any:
    async def bounded():
        async with asyncio.timeout(SCENARIO_LIMIT):
            return await scenario

    return asyncio.run(bounded())


def web_session(name: str) -> str:
    return f"session={name}&platform=web&web_user=alice"


def questions(tag: str) -> list[dict]:
    """``support.QUESTIONS`` with a question text of this test's own, which the panel shows."""
    return [dict(support.QUESTIONS[0], question=f"{support.QUESTIONS[0]['question']} ({tag})")]


def answers(qs: list[dict], label: str) -> dict:
    return {"answers": [{"question": qs[0]["question"], "selectedLabels": [label], "customInput": None}]}


async def send(mcp: Client, method: str, params: dict[str, Any], on_progress=None) -> dict[str, Any]:
    """A request through the SDK client's own dispatcher, stamped like the client's typed requests
    (the protocol-version header; on 2026-07-28 also the ``_meta`` envelope): the SDK has no
    typed method for tasks, and its ``call_tool`` cannot receive a task. ``on_progress`` gives
    the request a progressToken, as ``call_tool(progress_callback=…)`` does."""
    data = {"method": method, "params": dict(params)}
    opts: dict[str, Any] = {} if on_progress is None else {"on_progress": on_progress}
    mcp.session._stamp(data, opts)
    return await mcp.session._dispatcher.send_raw_request(method, data["params"], opts)


def rest(served: Served, method: str, path: str, **kwargs) -> requests.Response:
    headers = {"Authorization": f"Bearer {served.key}"}
    return requests.request(method, f"{served.base}/api/v1/{path}", headers=headers, timeout=support.TIMEOUT, **kwargs)


async def rest_ask(served: Served, ask_id: str) -> dict:
    response = await asyncio.to_thread(rest, served, "GET", f"asks/{ask_id}")
    assert response.status_code == 200, response.text
    return response.json()


class Panel:
    """alice's panel socket, remembering every message it was sent, so a test waits for the one it
    means (the snapshot on connecting also lists asks other tests left pending)."""

    def __init__(self, socket):
        self.socket = socket
        self.seen: list[dict] = []

    async def wait(self, matches: Callable[[dict], bool], timeout: float = support.TIMEOUT) -> dict:
        for message in self.seen:
            if matches(message):
                return message
        async with asyncio.timeout(timeout):
            while True:
                message = json.loads(await self.socket.recv())
                self.seen.append(message)
                if matches(message):
                    return message

    async def settle(self, seconds: float = 0.5) -> None:
        """Take in whatever arrives within ``seconds``."""
        with contextlib.suppress(TimeoutError):
            await self.wait(lambda message: False, timeout=seconds)

    @staticmethod
    def _shows(message: dict, qs: list[dict]) -> bool:
        return message.get("type") == "ask_user_questions" and message["questions"][0]["question"] == qs[0]["question"]

    async def shown(self, qs: list[dict]) -> dict:
        return await self.wait(lambda m: self._shows(m, qs))

    def times_shown(self, qs: list[dict]) -> int:
        return sum(self._shows(m, qs) for m in self.seen)

    async def withdrawn(self, ask_id: str) -> dict:
        return await self.wait(lambda m: m.get("type") == "ask_user_questions_cancelled" and m["requestId"] == ask_id)

    def was_withdrawn(self, ask_id: str) -> bool:
        return any(m.get("type") == "ask_user_questions_cancelled" and m["requestId"] == ask_id for m in self.seen)

    async def answer(self, shown: dict, label: str = "PostgreSQL") -> dict:
        ask_id = shown["requestId"]
        answer = answers(shown["questions"], label)["answers"]
        await self.socket.send(json.dumps({"type": "ask_user_questions_result", "requestId": ask_id, "answers": answer}))
        return await self.wait(lambda m: m.get("type") == "ask_user_questions_ack" and m["requestId"] == ask_id)


@contextlib.asynccontextmanager
async def panel(base: str, cookie: str) -> AsyncIterator[Panel]:
    async with support.Panel.open(base, cookie) as opened:
        yield Panel(opened.socket)


class TaskStatuses(ClientExtension):
    """Observes ``notifications/tasks/status``: the SDK's 2025-11-25 tables leave that
    notification out, so a client sees it only through a notification binding."""

    identifier = "io.askcards.tests/task-status"

    def __init__(self):
        self.received: list[types.TaskStatusNotificationParams] = []
        self.changed = asyncio.Event()

    def notifications(self):
        return [
            NotificationBinding(
                method="notifications/tasks/status", params_type=types.TaskStatusNotificationParams, handler=self._on
            )
        ]

    async def _on(self, params: types.TaskStatusNotificationParams) -> None:
        self.received.append(params)
        self.changed.set()

    async def of(self, task_id: str) -> types.TaskStatusNotificationParams:
        async with asyncio.timeout(support.TIMEOUT):
            while True:
                for params in self.received:
                    if params.task_id == task_id:
                        return params
                self.changed.clear()
                await self.changed.wait()


def _mcp_error(error: BaseException) -> MCPError | None:
    if isinstance(error, MCPError):
        return error
    for inner in getattr(error, "exceptions", ()):
        if (found := _mcp_error(inner)) is not None:
            return found
    return None


async def first_error(base: str, key: str, query: str, mode: str) -> MCPError:
    """The JSON-RPC error a client of this URL meets first (on the handshake in the legacy era, on
    its first request in the stateless one)."""
    try:
        async with support.client(base, key, query, mode=mode) as mcp:
            try:
                await mcp.list_tools()
            except MCPError as exc:
                return exc
    except BaseException as exc:  # the SDK raises a failed handshake out of its task groups
        if (found := _mcp_error(exc)) is not None:
            return found
        raise
    raise AssertionError(f"{query!r} was served without an error")


async def create_task(mcp: Client, qs: list[dict], **meta: Any) -> types.Task:
    params: dict[str, Any] = {"name": "ask_user_questions", "arguments": {"questions": qs}, "task": {}}
    if meta:
        params["_meta"] = meta
    return types.CreateTaskResult.model_validate(await send(mcp, "tools/call", params)).task


async def get_task(mcp: Client, task_id: str) -> types.GetTaskResult:
    return types.GetTaskResult.model_validate(await send(mcp, "tasks/get", {"taskId": task_id}))


def tasks_client(base: str, key: str, query: str):
    """A 2026-07-28 client declaring the tasks extension: the SDK stamps its capabilities, with
    the extension, into every request's ``_meta``."""
    return support.client(base, key, query, mode="2026-07-28", extensions=[advertise(TASKS_EXTENSION)])


async def create_extension_task(mcp: Client, qs: list[dict]) -> dict[str, Any]:
    """A plain ``tools/call``: with the extension declared, the server answers it with a task."""
    return await send(mcp, "tools/call", {"name": "ask_user_questions", "arguments": {"questions": qs}})


async def extension_task_ended(mcp: Client, task_id: str) -> dict[str, Any]:
    """``tasks/get`` polled (bounded) until the task is no longer working."""
    for _ in range(int(support.TIMEOUT / 0.2)):
        task = await send(mcp, "tasks/get", {"taskId": task_id})
        if task["status"] not in ("working", "input_required"):
            return task
        await asyncio.sleep(0.2)
    raise AssertionError(f"task {task_id} still working after {support.TIMEOUT} s")


# ---------------------------------------------------------------------------------- tools/list


@pytest.mark.parametrize("mode", MODES)
def test_tools_list_is_the_sessions_tools_as_rest_lists_them(served, mode):
    async def listed(query: str) -> list[types.Tool]:
        async with support.client(served.base, served.key, query, mode=mode) as mcp:
            return (await mcp.list_tools()).tools

    cases = {
        f"mcp-list-web-{mode}": (web_session(f"mcp-list-web-{mode}"), ["ask_user_questions"]),
        f"mcp-list-ding-{mode}": (f"session=mcp-list-ding-{mode}&platform=dingtalk", ["dingtalk_ask_user_question"]),
        f"mcp-list-wechat-{mode}": (f"session=mcp-list-wechat-{mode}&platform=wechat", []),
    }
    for key, (query, names) in cases.items():
        tools = run(listed(query))
        assert [tool.name for tool in tools] == names
        from_rest = rest(served, "GET", f"sessions/{key}/tools")
        assert from_rest.status_code == 200, from_rest.text
        assert [
            {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema} for tool in tools
        ] == from_rest.json()
        for tool in tools:
            # The legacy wire (2025-11-25) declares task support; 2026-07-28 has no tasks.
            assert tool.execution == (types.ToolExecution(task_support="optional") if mode == "legacy" else None)


# -------------------------------------------------------------------------------- blocking calls


@pytest.mark.parametrize("mode", MODES)
def test_blocking_call_reports_progress_and_returns_the_panels_answer(served, mode):
    qs = questions(f"progress {mode}")
    progress: list[tuple[float, float | None, str | None]] = []
    notified: list[types.ProgressNotification] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def on_message(message) -> None:
        if isinstance(message, types.ProgressNotification):
            notified.append(message)

    async def scenario():
        query = web_session(f"mcp-progress-{mode}")
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, query, mode=mode, message_handler=on_message
        ) as mcp:
            call = asyncio.create_task(
                mcp.call_tool("ask_user_questions", {"questions": qs}, progress_callback=on_progress)
            )
            shown = await alice.shown(qs)
            async with asyncio.timeout(support.TIMEOUT):  # the first progress goes out as the call parks
                while not progress:
                    await asyncio.sleep(0.05)
            assert (await alice.answer(shown, "SQLite"))["ok"] is True
            result = await asyncio.wait_for(call, support.TIMEOUT)
        return shown, result, await rest_ask(served, shown["requestId"])

    shown, result, ask = run(scenario())
    ask_id = shown["requestId"]
    assert result.is_error is False
    assert json.loads(result.content[0].text) == answers(qs, "SQLite")
    assert result.structured_content["status"] == "answered"
    assert result.structured_content["ask"]["id"] == ask_id
    assert result.structured_content["tool_result"] == result.content[0].text

    value, total, message = progress[0]
    assert 0 <= value <= total
    assert "alice" in message and "web" in message and ask_id in message
    assert notified and notified[0].params.progress_token is not None

    # REST reads the same ask, answered on the web panel.
    assert ask["status"] == "answered"
    assert ask["respondents"] == [dict(ask["respondents"][0], id="alice", status="submitted", surface="web")]
    assert ask["result"]["tool_result"] == result.content[0].text


@pytest.mark.parametrize("mode", MODES)
def test_blocking_call_past_its_deadline_returns_the_timeout_error(served, mode):
    qs = questions(f"deadline {mode}")

    async def scenario():
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, web_session(f"mcp-deadline-{mode}"), mode=mode
        ) as mcp:
            loop = asyncio.get_running_loop()
            started = loop.time()
            result = await mcp.call_tool("ask_user_questions", {"questions": qs}, meta={TIMEOUT_SECONDS: 2})
            elapsed = loop.time() - started
            shown = await alice.shown(qs)
            withdrawn = await alice.withdrawn(shown["requestId"])
        return result, elapsed, withdrawn

    result, elapsed, withdrawn = run(scenario())
    assert result.is_error is True
    assert TIMEOUT_TEXT in result.content[0].text
    assert result.structured_content["status"] == "expired"
    assert 2 <= elapsed < 15, "the serve process's worker expires the ask soon after its deadline"
    assert withdrawn["reason"] == "timeout"


def test_cancelling_a_waiting_call_cancels_its_ask(served):
    """Legacy era: the SDK client sends notifications/cancelled for the abandoned request."""
    qs = questions("cancel legacy")

    async def scenario():
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, web_session("mcp-cancel"), mode="legacy"
        ) as mcp:
            call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": qs}))
            shown = await alice.shown(qs)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            withdrawn = await alice.withdrawn(shown["requestId"])
            task = await get_task(mcp, shown["requestId"])
        return withdrawn, task, await rest_ask(served, shown["requestId"])

    withdrawn, task, ask = run(scenario())
    assert withdrawn["reason"] == "by_agent"
    assert (ask["status"], ask["reason"]) == ("cancelled", "by_agent")
    assert task.status == "cancelled"


@pytest.mark.parametrize("mode", MODES)
def test_a_dropped_connection_cancels_nothing_within_the_grace(served, mode):
    """The client goes away (its connection closes) while its call waits: within the grace period
    (60 s by default) the ask stays pending on the panel, and alice can still answer it."""
    qs = questions(f"dropped {mode}")

    async def scenario():
        async with panel(served.base, served.cookie) as alice:
            async with contextlib.AsyncExitStack() as connection:
                mcp = await connection.enter_async_context(
                    support.client(served.base, served.key, web_session(f"mcp-dropped-{mode}"), mode=mode)
                )
                call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": qs}))
                shown = await alice.shown(qs)
            with contextlib.suppress(MCPError, asyncio.CancelledError):
                await asyncio.wait_for(call, support.TIMEOUT)  # the closed client ends its own call
            await alice.settle(1.0)
            assert not alice.was_withdrawn(shown["requestId"])
            before = await rest_ask(served, shown["requestId"])
            ack = await alice.answer(shown)
        return before, ack, await rest_ask(served, shown["requestId"])

    before, ack, after = run(scenario())
    assert before["status"] == "pending"
    assert ack["ok"] is True
    assert after["status"] == "answered"


@pytest.mark.parametrize("mode", MODES)
def test_a_client_that_never_comes_back_has_its_ask_withdrawn_caller_gone(tmp_path, mode):
    """The client gives up on a blocking call and exits; nobody calls again with its call_id nor
    reads the task. Once the grace period passes the ask is cancelled (caller_gone) and the panel
    withdraws it with words saying so: alice is not left answering into a void."""
    qs = questions(f"caller gone {mode}")

    async def scenario(base: str, key: str, cookie: str):
        async with panel(base, cookie) as alice:
            async with support.client(base, key, web_session(f"mcp-gone-{mode}"), mode=mode) as mcp:
                call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": qs}))
                shown = await alice.shown(qs)
                call.cancel()
                with contextlib.suppress(MCPError, asyncio.CancelledError):
                    await call
            withdrawn = await alice.withdrawn(shown["requestId"])
        return shown, withdrawn

    with support.seeded(tmp_path, ASKCARDS_MCP_CALLER_GRACE_SECONDS="2") as (base, seed):
        shown, withdrawn = run(scenario(base, seed["key"], support.login_cookie(base)))
        response = requests.get(f"{base}/api/v1/asks/{shown['requestId']}", timeout=support.TIMEOUT,
                                headers={"Authorization": f"Bearer {seed['key']}"})
    assert withdrawn["reason"] == "caller_gone"
    assert (response.json()["status"], response.json()["reason"]) == ("cancelled", "caller_gone")


@pytest.mark.parametrize("mode", MODES)
def test_a_call_id_names_one_ask(served, mode):
    qs = questions(f"call_id {mode}")
    call_id = f"mcp-call-{mode}"

    async def scenario():
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, web_session(f"mcp-call-id-{mode}"), mode=mode
        ) as mcp:
            first = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": qs}, meta={CALL_ID: call_id}))
            shown = await alice.shown(qs)
            await alice.answer(shown, "SQLite")
            first = await asyncio.wait_for(first, support.TIMEOUT)
            again = await mcp.call_tool("ask_user_questions", {"questions": qs}, meta={CALL_ID: call_id})
            with pytest.raises(MCPError) as other_tool:
                await mcp.call_tool("dingtalk_ask_user_question", {"action": "list"}, meta={CALL_ID: call_id})
            await alice.settle(0.5)
            shown_times = alice.times_shown(qs)
        async with support.client(served.base, served.key, web_session(f"mcp-call-id-other-{mode}"), mode=mode) as mcp:
            with pytest.raises(MCPError) as other_session:
                await mcp.call_tool("ask_user_questions", {"questions": qs}, meta={CALL_ID: call_id})
        return first, again, other_tool.value, other_session.value, shown_times

    first, again, other_tool, other_session, shown_times = run(scenario())
    assert again.structured_content["ask"]["id"] == first.structured_content["ask"]["id"]
    assert again.content[0].text == first.content[0].text
    assert json.loads(again.content[0].text) == answers(qs, "SQLite")
    assert shown_times == 1, "the repeated call asked alice nothing new"
    for error in (other_tool, other_session):
        assert error.code == INVALID_PARAMS
        assert "call_id was already used" in error.message


# ------------------------------------------------------------------------------------------ tasks


def test_task_answered_on_the_panel(served):
    qs = questions("task answered")
    statuses = TaskStatuses()

    async def scenario():
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, web_session("mcp-task"), mode="legacy", extensions=[statuses]
        ) as mcp:
            loop = asyncio.get_running_loop()
            started = loop.time()
            task = await create_task(mcp, qs)
            created_in = loop.time() - started
            shown = await alice.shown(qs)
            working = await get_task(mcp, task.task_id)
            parked = asyncio.Event()  # tasks/result reports progress once it waits for the answer

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                parked.set()

            result = asyncio.create_task(send(mcp, "tasks/result", {"taskId": task.task_id}, on_progress=on_progress))
            await asyncio.wait_for(parked.wait(), support.TIMEOUT)
            assert not result.done()
            await alice.answer(shown, "SQLite")
            result = await asyncio.wait_for(result, support.TIMEOUT)
            # The result the woken tasks/result handed over counts as delivered: the panel says so.
            await alice.wait(lambda m: m.get("type") == "ask_user_questions_delivered" and m["requestId"] == task.task_id)
            notified = await statuses.of(task.task_id)
            completed = await get_task(mcp, task.task_id)
            with pytest.raises(MCPError) as cancel_ended:
                await send(mcp, "tasks/cancel", {"taskId": task.task_id})
            listed = types.ListTasksResult.model_validate(await send(mcp, "tasks/list", {}))
        return task, created_in, shown, working, result, notified, completed, cancel_ended.value, listed

    task, created_in, shown, working, result, notified, completed, cancel_ended, listed = run(scenario())
    assert created_in < 5, "a task-augmented call answers at once"
    assert task.task_id == shown["requestId"]
    assert (task.status, task.poll_interval) == ("working", 5000)
    assert "alice" in task.status_message and task.ttl > 0
    assert working.status == "working"

    parsed = types.CallToolResult.model_validate(result)
    assert parsed.is_error is False
    assert json.loads(parsed.content[0].text) == answers(qs, "SQLite")
    assert result["_meta"][RELATED_TASK] == {"taskId": task.task_id}

    assert (notified.status, notified.task_id) == ("completed", task.task_id)
    assert completed.status == "completed"
    assert cancel_ended.code == INVALID_PARAMS and "already ended" in cancel_ended.message
    assert [t.status for t in listed.tasks if t.task_id == task.task_id] == ["completed"]


def test_task_cancelled_and_hidden_from_another_agent(served):
    qs = questions("task cancelled")

    async def scenario():
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, web_session("mcp-task-cancel"), mode="legacy"
        ) as mcp:
            task = await create_task(mcp, qs)
            await alice.shown(qs)
            other_client = support.client(served.base, served.other_key, web_session("mcp-task-other"), mode="legacy")
            async with other_client as other:
                refused = {}
                for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                    with pytest.raises(MCPError) as error:
                        await send(other, method, {"taskId": task.task_id})
                    refused[method] = error.value
                others = types.ListTasksResult.model_validate(await send(other, "tasks/list", {}))
            still = await get_task(mcp, task.task_id)
            cancelled = types.CancelTaskResult.model_validate(await send(mcp, "tasks/cancel", {"taskId": task.task_id}))
            withdrawn = await alice.withdrawn(task.task_id)
            result = types.CallToolResult.model_validate(await send(mcp, "tasks/result", {"taskId": task.task_id}))
            listed = types.ListTasksResult.model_validate(await send(mcp, "tasks/list", {}))
        return task, refused, others, still, cancelled, withdrawn, result, listed

    task, refused, others, still, cancelled, withdrawn, result, listed = run(scenario())
    for method, error in refused.items():
        assert error.code == INVALID_PARAMS, method
        assert f"no task {task.task_id!r}" in error.message, method
    assert task.task_id not in [t.task_id for t in others.tasks]
    assert still.status == "working", "another agent's tasks/cancel cancelled nothing"
    assert cancelled.status == "cancelled"
    assert withdrawn["reason"] == "by_agent"
    assert result.is_error is True and CANCELLED_TEXT in result.content[0].text
    assert [t.status for t in listed.tasks if t.task_id == task.task_id] == ["cancelled"]


def test_task_past_its_deadline_completes_with_an_error(served):
    qs = questions("task deadline")

    async def scenario():
        async with panel(served.base, served.cookie) as alice, support.client(
            served.base, served.key, web_session("mcp-task-deadline"), mode="legacy"
        ) as mcp:
            task = await create_task(mcp, qs, **{TIMEOUT_SECONDS: 2})
            await alice.shown(qs)
            result = types.CallToolResult.model_validate(await send(mcp, "tasks/result", {"taskId": task.task_id}))
            ended = await get_task(mcp, task.task_id)
        return result, ended

    result, ended = run(scenario())
    assert result.is_error is True and TIMEOUT_TEXT in result.content[0].text
    assert ended.status == "completed" and TIMEOUT_TEXT in ended.status_message


def test_extension_task_answered_on_the_panel(served):
    """2026-07-28: the task comes back at once, is polled with tasks/get, and hands over the
    panel's answer inline; a non-declaring client of the same wire gets -32021 for it."""
    qs = questions("extension task answered")

    async def scenario():
        async with panel(served.base, served.cookie) as alice, tasks_client(
            served.base, served.key, web_session("mcp-ext-task")
        ) as mcp:
            loop = asyncio.get_running_loop()
            started = loop.time()
            task = await create_extension_task(mcp, qs)
            created_in = loop.time() - started
            shown = await alice.shown(qs)
            working = await send(mcp, "tasks/get", {"taskId": task["taskId"]})
            async with support.client(served.base, served.key, web_session("mcp-ext-task"), mode="2026-07-28") as plain:
                with pytest.raises(MCPError) as undeclared:
                    await send(plain, "tasks/get", {"taskId": task["taskId"]})
            await alice.answer(shown, "SQLite")
            completed = await extension_task_ended(mcp, task["taskId"])
            cancel_ended = await send(mcp, "tasks/cancel", {"taskId": task["taskId"]})
        return task, created_in, shown, working, undeclared.value, completed, cancel_ended

    task, created_in, shown, working, undeclared, completed, cancel_ended = run(scenario())
    assert created_in < 5, "the task answers at once"
    assert (task["resultType"], task["status"], task["pollIntervalMs"]) == ("task", "working", 5000)
    assert task["taskId"] == shown["requestId"] and task["ttlMs"] > 0 and "ttl" not in task
    assert working["status"] == "working"
    assert undeclared.code == -32021
    assert completed["status"] == "completed"
    result = types.CallToolResult.model_validate(completed["result"])
    assert result.is_error is False and json.loads(result.content[0].text) == answers(qs, "SQLite")
    assert RELATED_TASK not in completed["result"]["_meta"]
    assert cancel_ended["resultType"] == "complete"  # acknowledged; the answer stands
    assert rest_ask_status(served, task["taskId"]) == "answered"


def rest_ask_status(served: Served, ask_id: str) -> str:
    response = rest(served, "GET", f"asks/{ask_id}")
    assert response.status_code == 200, response.text
    return response.json()["status"]


@pytest.mark.parametrize("era", MODES)
def test_task_polled_across_a_restart(tmp_path, era):
    """A task outlives the process that created it: a new process on the same data serves
    tasks/get, shows the ask on the panel and hands over the answer (2025-11-25: tasks/result;
    2026-07-28: inline in tasks/get)."""
    env = serving.service_env(tmp_path)
    serving.manage(env, "migrate", "-v0")
    seed = serving.shell_json(env, support.SEED)
    qs = questions(f"task restart {era}")
    query = web_session(f"mcp-task-restart-{era}")

    def connect(base: str):
        return support.client(base, seed["key"], query, mode="legacy") if era == "legacy" else tasks_client(base, seed["key"], query)

    async def create(base: str, cookie: str) -> str:
        async with panel(base, cookie) as alice, connect(base) as mcp:
            if era == "legacy":
                task_id = (await create_task(mcp, qs)).task_id
            else:
                task_id = (await create_extension_task(mcp, qs))["taskId"]
            await alice.shown(qs)
            assert (await send(mcp, "tasks/get", {"taskId": task_id}))["status"] == "working"
        return task_id

    async def finish(base: str, cookie: str, task_id: str):
        async with connect(base) as mcp:
            working = await send(mcp, "tasks/get", {"taskId": task_id})
        async with panel(base, cookie) as alice, connect(base) as mcp:
            shown = await alice.shown(qs)
            if era == "legacy":
                result = asyncio.create_task(send(mcp, "tasks/result", {"taskId": task_id}))
                await alice.answer(shown, "SQLite")
                result = await asyncio.wait_for(result, support.TIMEOUT)
                completed = await send(mcp, "tasks/get", {"taskId": task_id})
            else:
                await alice.answer(shown, "SQLite")
                completed = await extension_task_ended(mcp, task_id)
                result = completed["result"]
        return working, shown, types.CallToolResult.model_validate(result), completed

    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with serving.serve(env, "--no-migrate", log_dir=tmp_path / "first") as base:
        task_id = run(create(base, support.login_cookie(base)))
    with serving.serve(env, "--no-migrate", log_dir=tmp_path / "second") as base:
        working, shown, result, completed = run(finish(base, support.login_cookie(base), task_id))
    assert working["status"] == "working"
    assert shown["requestId"] == task_id
    assert result.is_error is False and json.loads(result.content[0].text) == answers(qs, "SQLite")
    assert completed["status"] == "completed"


# -------------------------------------------------------------------------------------- bad input


def _post(served: Served, body: bytes, *, key: str | None = "") -> requests.Response:
    """A POST as an MCP client sends it (``key=None``: no Authorization header; "": the agent's)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    if key is not None:
        headers["Authorization"] = f"Bearer {key or served.key}"
    return requests.post(f"{served.base}/mcp?{web_session('mcp-bad')}", data=body, headers=headers, timeout=support.TIMEOUT)


LIST_TOOLS = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()


@pytest.mark.parametrize("body", [b'{"jsonrpc": "2.0", "id": 1, "method"', b""], ids=["truncated", "empty"])
def test_a_body_that_is_not_json_is_a_parse_error(served, body):
    response = _post(served, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_an_object_that_is_not_json_rpc_is_refused_by_the_sdk(served):
    response = _post(served, json.dumps({"id": 1, "method": "tools/list"}).encode())  # no "jsonrpc"
    assert response.status_code == 400
    assert response.json()["error"]["code"] < 0


@pytest.mark.parametrize(
    "body", [b"[1, 2]", b'"tools/list"', b"null", b"[" + LIST_TOOLS + b"]"], ids=["array", "string", "null", "batch"]
)
def test_a_body_that_is_not_a_json_rpc_object_is_an_invalid_request(served, body):
    response = _post(served, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert "one JSON-RPC message object" in error["message"]


@pytest.mark.parametrize("key", ["ak_not-a-key", None], ids=["wrong", "missing"])
def test_a_request_without_a_valid_key_is_401_with_bearer_challenge(served, key):
    response = _post(served, LIST_TOOLS, key=key)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "invalid_key"


def test_get_is_method_not_allowed_on_the_stateless_endpoint(served):
    """A stateless server has nothing to push on a standalone SSE stream: GET is 405 at once
    (the spec's answer for a server that offers no such stream) instead of an idle stream."""
    response = requests.get(
        f"{served.base}/mcp?{web_session('mcp-bad')}",
        headers={"Authorization": f"Bearer {served.key}", "Accept": "text/event-stream"},
        timeout=5,
    )
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert response.json()["error"]["code"] == -32600


@pytest.mark.parametrize("mode", MODES)
def test_bad_calls_are_clean_errors(served, mode):
    async def scenario():
        async with support.client(served.base, served.key, web_session(f"mcp-bad-{mode}"), mode=mode) as mcp:
            await mcp.list_tools()
            with pytest.raises(MCPError) as unknown_method:
                await send(mcp, "askcards/nothing", {})
            with pytest.raises(MCPError) as unknown_tool:
                await mcp.call_tool("no_such_tool", {})
            wrong = await mcp.call_tool("ask_user_questions", {"questions": "which database?"})
        return unknown_method.value, unknown_tool.value, wrong

    unknown_method, unknown_tool, wrong = run(scenario())
    assert unknown_method.code == -32601
    assert unknown_tool.code == INVALID_PARAMS
    assert "'no_such_tool'" in unknown_tool.message and "ask_user_questions" in unknown_tool.message
    # The session's own tools, not every tool askcards has (a web session has no DingTalk tool).
    assert "dingtalk_ask_user_question" not in unknown_tool.message
    assert wrong.is_error is True and INVALID_ARGUMENTS_TEXT in wrong.content[0].text
    assert wrong.structured_content["status"] == "failed" and wrong.structured_content["ask"] is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "query, says",
    [
        ("", "/mcp?session="),
        ("platform=web&web_user=alice", "/mcp?session="),
        (web_session("mcp-bad-param") + "&colour=red", "unknown URL parameter 'colour'"),
        ("session=mcp-bad-bob&platform=web&web_user=bob", "was not granted that user"),
    ],
    ids=["no-query", "no-session", "unknown-parameter", "not-granted"],
)
def test_a_url_that_names_no_usable_session_is_a_json_rpc_error(served, mode, query, says):
    error = run(first_error(served.base, served.key, query, mode))
    assert error.code == INVALID_PARAMS
    assert says in error.message
