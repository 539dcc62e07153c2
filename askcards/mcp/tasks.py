"""Tasks: ``tasks/get``, ``tasks/update``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list``, read
from the database, so any process answers them, for the calling agent only.
"""
from __future__ import annotations

import logging

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import mcp_types as types
from django.db.models import Q
from django.utils.dateparse import parse_datetime
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from askcards.wake import events
from askcards import selectors, services
from askcards.db import in_pool
from askcards.errors import NotFound, QuotaExceeded
from askcards.models import Agent, Ask

from . import results
from .caller import Caller
from .context import CALLER, HOST_TOOLS, QUOTA_EXCEEDED, TASKS_PAGE_SIZE, host_asker, host_form, invalid, modern
from .waiting import park, read_ask


logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ tasks


def _polled(agent: Agent, task_id: str) -> Ask:
    """The ask a task request names; a client reading it as a task is there for it (a blocking
    call's lease, if it has one, runs on: ``services.caller_polled``)."""
    ask = read_ask(agent, task_id)
    services.caller_polled(ask=ask)
    return ask


async def task_ask(task_id: str) -> Ask:
    try:
        return await in_pool(_polled, CALLER.get().agent, task_id)
    except NotFound:
        raise invalid(f"no task {task_id!r} (a task id is the id of one of this agent's asks, like q_<32 hex>)") from None


async def tasks_get(ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
    ask = await task_ask(params.task_id)
    form = host_form(ctx, CALLER.get(), ask)
    if not modern(ctx):
        # 2025-11-25: a task that needs the host's input says so; its tasks/result puts the form.
        return {**results.task(ask), "status": "input_required"} if form is not None else results.task(ask)
    if form is not None:
        return results.host_input_task(ask, form)
    detailed = results.detailed_task(ask)
    if "result" in detailed:  # the result handed over inline: it counts as delivered
        await in_pool(services.ask_result_returned, ask=ask)
    return detailed


async def tasks_update(ctx: ServerRequestContext[Any, Any], params: types.RequestParams) -> dict[str, Any]:
    """``tasks/update`` (2026-07-28): responses to a task's outstanding input requests. The one
    askcards issues is the host surface's form (``host=ask``): the host's user answering it
    answers the ask there (surface ``host``; the first answer wins, as everywhere), declining or
    dismissing it is their answer too (cancelled ``declined`` / ``dismissed``). A response to any
    other key, or one whose content does not answer the form, is ignored, as the extension says;
    the task must still be one of this agent's."""
    task_id = (ctx.params or {}).get("taskId")
    responses = (ctx.params or {}).get("inputResponses")
    if not isinstance(task_id, str):
        raise invalid("tasks/update needs params.taskId (a string) and params.inputResponses (an object)")
    if not isinstance(responses, Mapping):
        raise invalid("tasks/update needs params.inputResponses (an object keyed by input request)")
    caller = CALLER.get()
    ask = await task_ask(task_id)
    response = responses.get(results.host_request_key(ask))
    if caller.host_ask and ask.is_open and ask.tool in HOST_TOOLS and response is not None:
        await in_pool(host_answered, caller, ask, response)
    return {}


def host_answered(caller: Caller, ask: Ask, response: Any) -> None:
    """The host's user's response to the host surface's form (an ``ElicitResult``), through
    ``services.host_respond``; content that is not an elicitation result, or does not answer the
    form, changes nothing."""
    try:
        result = types.ElicitResult.model_validate(response)
    except ValidationError:
        logger.info("ask %s: a host response that is no elicitation result, ignored", ask.id)
        return
    outcome = services.host_respond(agent=caller.agent, ask_id=ask.id, action=result.action, content=result.content)
    if not outcome.taken:
        reason = outcome.reason.value if outcome.reason is not None else ""
        logger.info("ask %s: the host's response not taken (%s) %s", ask.id, reason, outcome.detail)


async def tasks_result(ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
    """Blocks until the task ends (its deadline at most), then hands over its result; a status
    notification goes out on this stream when it ends."""
    ask = await task_ask(params.task_id)
    if ask.is_open:
        try:
            services.quota_check_parked(agent=CALLER.get().agent)
        except QuotaExceeded as exc:
            raise MCPError(code=QUOTA_EXCEEDED, message=f"{exc.message} (retry after {exc.retry_after} s)") from None
        task_id = ask.id
        del ask  # a parked call holds no row while it waits
        async with events.Waiter("MCP call") as waiter:
            ask_host = host_asker(ctx, CALLER.get(), task=True)
            # The ended task's result counts as returned in the same trip to the pool as its read.
            ask = await park(ctx, CALLER.get(), task_id, waiter, returned=True, ask_host=ask_host)
        if ask.is_open:
            raise MCPError(code=INTERNAL_ERROR, message=f"task {ask.id} is still working past its deadline; poll tasks/get")
        status = types.TaskStatusNotification(params=types.TaskStatusNotificationParams.model_validate(results.task(ask), by_name=False))
        # The SDK's ServerNotification union leaves the tasks extension's notification out (its
        # types are types-only there); send_notification only serialises what it is given.
        await ctx.session.send_notification(status, related_request_id=ctx.request_id)  # type: ignore[arg-type]
    else:
        await in_pool(services.ask_result_returned, ask=ask)
    return results.task_result(ask)


async def tasks_cancel(ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams) -> dict[str, Any]:
    caller = CALLER.get()
    ask = await task_ask(params.task_id)
    cancelled_now = await in_pool(services.ask_cancel, ask=ask, reason=Ask.Reason.BY_AGENT, actor=f"agent:{caller.agent.name}")
    if modern(ctx):
        return {}  # the extension's cancel is an acknowledgement, whether or not the task had ended
    ask = await task_ask(params.task_id)
    if not cancelled_now:
        raise invalid(f"task {ask.id} has already ended ({ask.status}, {ask.reason}); nothing was cancelled")
    return results.task(ask)


ASK_ID = re.compile(r"q_[0-9a-f]{32}")


def _cursor_position(cursor: str) -> tuple[datetime, str]:
    """Where a ``nextCursor`` (``<created_at ISO 8601>|<ask id>``) resumes; -32602 for anything
    else: a malformed or impossible date (``2024-02-30``), a bad or missing UTC offset, an id that
    is not an ask id."""
    created, _, ask_id = cursor.partition("|")
    try:
        when = parse_datetime(created)
    except ValueError:  # well-formed but impossible: a 30th of February, an offset past ±24 h
        when = None
    if when is None or when.tzinfo is None or not ASK_ID.fullmatch(ask_id):
        raise invalid("invalid tasks/list cursor: pass the nextCursor of the previous page, or no cursor for the first")
    return when, ask_id


def _tasks_page(agent: Agent, cursor: str | None) -> dict[str, Any]:
    asks = selectors.ask_list(agent=agent)
    if cursor:
        when, ask_id = _cursor_position(cursor)
        asks = asks.filter(Q(created_at__lt=when) | Q(created_at=when, id__lt=ask_id))
    page = list(asks[: TASKS_PAGE_SIZE + 1])
    data: dict[str, Any] = {"tasks": [results.task(ask) for ask in page[:TASKS_PAGE_SIZE]]}
    if len(page) > TASKS_PAGE_SIZE:
        last = page[TASKS_PAGE_SIZE - 1]
        data["nextCursor"] = f"{last.created_at.isoformat()}|{last.id}"
    return data


async def tasks_list(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams) -> dict[str, Any]:
    return await in_pool(_tasks_page, CALLER.get().agent, params.cursor)
