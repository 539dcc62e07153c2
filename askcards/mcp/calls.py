"""``tools/list`` and ``tools/call`` (blocking, as a task, put to the host, the headless permission
prompt), and the MCP App's resource and its app-only tool.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from django.db.models import prefetch_related_objects
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from askcards.wake import events
from askcards import services, tools
from askcards.api.leases import KEEPER
from askcards.db import in_pool
from askcards.errors import AskcardsError, QuotaExceeded
from askcards.hosts import prompt_tool
from askcards.models import Ask
from askcards.surfaces import web
from askcards.tools.host_prompts import HostEventError

from . import apps, results
from .caller import Caller
from .context import CALLER, HOST_TOOL, app_tool, declares_form_elicitation, host_asker, host_form, invalid, modern, shows_apps
from .waiting import cancel_key, despite_leaving, park, read_ask
from .tasks import host_answered, task_ask


# ---------------------------------------------------------------------------------------- tools


async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    caller = CALLER.get()
    session = caller.session
    rendered = shows_apps(ctx)
    listed = [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            execution=types.ToolExecution(task_support="optional"),
            _meta=apps.tool_meta() if rendered and tool.name == HOST_TOOL else None,
        )
        for tool in tools.tools_for(platform=session.platform, is_subagent=session.is_subagent)
    ]
    if rendered:
        listed.extend(apps.app_tools())
    if caller.permission_prompt:
        listed.append(types.Tool(name=prompt_tool.NAME, description=prompt_tool.DESCRIPTION,
                                 input_schema=prompt_tool.INPUT_SCHEMA))
    return types.ListToolsResult(tools=listed)


async def _run(ctx: ServerRequestContext[Any, Any], caller: Caller, name: str, arguments: Any) -> services.ToolCallOutcome:
    """``services.tool_call`` with the request's ``_meta`` options; protocol errors for what REST
    answers with 4xx (unknown tool, a reused call_id, bad options)."""
    meta = (ctx.params or {}).get("_meta") or {}
    call_id = meta.get(results.CALL_ID_META)
    if call_id is not None and (not isinstance(call_id, str) or not 1 <= len(call_id) <= 200):
        raise invalid(f"_meta[{results.CALL_ID_META!r}] must be a string of 1 to 200 characters")
    timeout = meta.get(results.TIMEOUT_META)
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)):
        raise invalid(f"_meta[{results.TIMEOUT_META!r}] must be a whole number of seconds")
    try:
        return await in_pool(
            services.tool_call,
            agent=caller.agent,
            session=caller.session,
            name=name,
            arguments={} if arguments is None else arguments,
            call_id=call_id,
            sender_id=caller.sender_id,
            timeout_seconds=timeout,
        )
    except QuotaExceeded as exc:
        return _quota_refusal(exc)
    except AskcardsError as exc:
        raise invalid(exc.message) from None


async def _made(ctx: ServerRequestContext[Any, Any], caller: Caller, name: str, arguments: Any) -> services.ToolCallOutcome:
    """``_run``, finished even if the client goes away meanwhile: an open ask it made for a
    blocking call then gets the lease of a call that left, the grace period, as if it had parked
    and left. Else the ask, leased by nobody, would stay open for a person to answer into a void
    until its deadline."""

    async def left(outcome: services.ToolCallOutcome) -> None:
        if outcome.ask is not None and outcome.ask.is_open and outcome.ask.blocking:
            await in_pool(services.caller_left, ask_id=outcome.ask.id, parked=False)

    return await despite_leaving(_run(ctx, caller, name, arguments), left)


def _quota_refusal(exc: QuotaExceeded) -> services.ToolCallOutcome:
    """A tool call over one of the agent's quotas: a tool error the model and its host read (the
    REST API's 429 message, with the seconds to wait), no ask made."""
    text = json.dumps({"error": exc.message, "reason": exc.code, "retry_after": exc.retry_after}, ensure_ascii=False)
    return services.ToolCallOutcome("failed", text, None, False)


def call_result(status: str, text: str | None, ask: Ask | None) -> types.CallToolResult:
    # The model fills what each protocol revision requires of it (2026-07-28: resultType).
    return types.CallToolResult.model_validate(results.tool_result(status, text, ask), by_name=False)


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
    caller = CALLER.get()
    if app_tool(params.name) and shows_apps(ctx):
        return await in_pool(call_app_tool, caller, params.name, params.arguments)
    if caller.permission_prompt and params.name == prompt_tool.NAME:
        return await permission_prompt(ctx, caller, params.arguments)
    if params.name == HOST_TOOL and caller.host_ask and modern(ctx) and declares_form_elicitation(ctx):
        return await call_with_host(ctx, caller, params)
    tool = tools.get(params.name)
    if tool is not None and tool.blocking:
        try:  # before the call, so a refusal changes nothing
            services.quota_check_parked(agent=caller.agent)
        except QuotaExceeded as exc:
            outcome = _quota_refusal(exc)
            return call_result(outcome.status, outcome.tool_result, None)
    async with events.Waiter("MCP call") as waiter:
        if tool is not None and tool.blocking and ctx.request_id is not None:
            # Before the ask exists: a cancel that arrives while it is being made waits in the queue.
            await waiter.add(cancel_key(caller, ctx.request_id))
        outcome = await _made(ctx, caller, params.name, params.arguments)
        if outcome.ask is None:
            return call_result(outcome.status, outcome.tool_result, None)
        _release_arguments(ctx, params)
        status, text, ask_id = outcome.status, outcome.tool_result, outcome.ask.id
        parks = outcome.ask.is_open and outcome.ask.blocking
        del outcome  # a parked call holds no row while it waits, the ask it made included
        # The ended ask's result counts as returned in the same trip to the pool as its read.
        if parks:
            ask = await park(ctx, caller, ask_id, waiter, lease=True, returned=True, ask_host=host_asker(ctx, caller))
            if ask.is_open:
                text = (
                    f"the ask {ask.id} is still open past its deadline (is the askcards worker running?); "
                    "read it later with tasks/get or GET /api/v1/asks/{id}"
                )
                return call_result(Ask.Status.FAILED, text, ask)
        else:
            ask = await in_pool(read_ask, caller.agent, ask_id, returned=True)
    if not ask.blocking:  # the DingTalk tool answers at once; its later outcome is its task's
        return call_result(status, text, ask)
    return call_result(ask.status, (ask.result or {}).get("tool_result"), ask)


def _release_arguments(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> None:
    """Once its ask is made, a call keeps no copy of its arguments (the ask has them) nor a second
    parse of its ``_meta`` (read from the raw params): the SDK holds the request's params, raw and
    validated, for as long as the call is served, which for a parked call is until its ask ends."""
    params.arguments = params.meta = None
    if isinstance(ctx.params, dict):
        ctx.params.pop("arguments", None)


async def call_with_host(ctx: ServerRequestContext[Any, Any], caller: Caller, params: types.CallToolRequestParams) -> Any:
    """A blocking call also put to the host's own user (``host=ask``, 2026-07-28): multi round-trip.
    (On the handshake revisions the call parks as any blocking call and its stream carries an
    ``elicitation/create``: ``host_asker``.)
    The first round makes the ask (on every surface, as always) and answers ``input_required``
    with the host surface's form and a signed ``requestState`` naming the ask — the only state
    kept between rounds. The retry carries the host's response (``inputResponses``) and that
    state: the response answers the ask (or declines it) unless another surface answered first,
    and the call returns the ask's result. An ask still open then (the response did not answer
    the form) is asked again."""
    if params.request_state is None:
        outcome = await _made(ctx, caller, params.name, params.arguments)
        if outcome.ask is None:
            return call_result(outcome.status, outcome.tool_result, None)
        ask = await in_pool(read_ask, caller.agent, outcome.ask.id)
    else:
        ask_id = results.request_state_ask(params.request_state, agent_id=caller.agent.pk)
        if ask_id is None:
            raise invalid("requestState is not one this server issued for this agent, or it has expired; "
                           "call again without it")
        ask = await task_ask(ask_id)
        response = (params.input_responses or {}).get(results.host_request_key(ask))
        if response is not None and ask.is_open:
            await in_pool(host_answered, caller, ask, response)
            ask = await task_ask(ask_id)
    form = host_form(ctx, caller, ask)
    if form is not None:
        return results.host_input_required(ask, form)
    if ask.is_open:  # never for a question form on 2026-07-28, which the schema always expresses
        raise MCPError(code=INTERNAL_ERROR, message=f"ask {ask.id} cannot be put to the host; read it with tasks/get")
    await in_pool(services.ask_result_returned, ask=ask)
    return call_result(ask.status, (ask.result or {}).get("tool_result"), ask)


async def permission_prompt(ctx: ServerRequestContext[Any, Any], caller: Caller, arguments: Any) -> types.CallToolResult:
    """The headless permission prompt (``askcards.hosts.prompt_tool``): an approval asked like a
    hook's, parked until it ends; the client going away withdraws it (``host_gone``)."""

    def reply(decision: dict[str, Any]) -> types.CallToolResult:
        text = json.dumps(decision, ensure_ascii=False)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def left(made: str | None) -> None:  # the client went away as the ask was being made
        if made is not None:
            await in_pool(services.host_left, agent=caller.agent, ask_id=made)

    try:
        prompt = prompt_tool.read_call(arguments)
    except HostEventError as exc:
        return reply(prompt_tool.refusal(f"askcards could not ask about this: {exc}"))
    meta = (ctx.params or {}).get("_meta") or {}
    timeout = meta.get(results.TIMEOUT_META)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        timeout = services.DEFAULT_TIMEOUT_SECONDS
    try:
        services.quota_check_parked(agent=caller.agent)
        ask_id = await despite_leaving(
            in_pool(services.host_prompt, agent=caller.agent, session=caller.session, sender_id=caller.sender_id,
                    prompt=prompt, timeout_seconds=timeout),
            left)
    except QuotaExceeded as exc:
        return reply(prompt_tool.refusal(exc.message))
    except (HostEventError, AskcardsError) as exc:
        return reply(prompt_tool.refusal(f"askcards could not ask about this: {exc}"))
    if ask_id is None:
        return reply(prompt_tool.refusal(prompt_tool.NOBODY))

    try:
        with KEEPER.holding(ask_id):  # the host's lease on it (services.waiters)
            async with events.Waiter("MCP call") as waiter:
                await park(ctx, caller, ask_id, waiter)
    except BaseException:  # the client went away (its request cancelled): nobody answers into a void
        with anyio.CancelScope(shield=True):
            await left(ask_id)
        raise
    decided = await in_pool(services.host_reply, agent=caller.agent, ask_id=ask_id, prompt=prompt,
                            decide=prompt_tool.decision, final=True)
    return reply(decided or prompt_tool.refusal(prompt_tool.UNANSWERED))


async def call_as_task(ctx: ServerRequestContext[Any, Any], caller: Caller, raw: Mapping[str, Any], *,
                       extension: bool = False) -> Any:
    """A task-augmented ``tools/call``: the ask is created as usual (committed before this
    returns, so a ``tasks/get`` on any process finds it) and returned at once as a working task.
    A call that creates no ask (DingTalk's ``list``, a refusal) answers directly."""
    try:
        params = types.CallToolRequestParams.model_validate(raw, by_name=False)
    except ValidationError:
        raise invalid("invalid tools/call params: expected {name, arguments?, task: {ttl?}}") from None
    outcome = await _run(ctx, caller, params.name, params.arguments)
    if outcome.ask is None:
        if extension:
            return call_result(outcome.status, outcome.tool_result, None)
        return results.tool_result(outcome.status, outcome.tool_result, None)
    ask = await in_pool(read_ask, caller.agent, outcome.ask.id)
    if extension:
        return results.created_task(ask)
    return {"task": results.task(ask), "_meta": {results.ASK_ID_META: outcome.ask.id}}


# ------------------------------------------------------------------------------------- MCP Apps


def call_app_tool(caller: Caller, name: str, arguments: Any) -> types.CallToolResult:
    """The app-only tools (``askcards.mcp.apps``), for the caller's own asks in its session. Bad
    input is a tool error saying what was wrong; nothing changes."""
    arguments = arguments if arguments is not None else {}
    if not isinstance(arguments, Mapping):
        return apps.tool_error(f"{name} takes an object of arguments")
    try:
        if name == apps.FIND_TOOL:
            ask = services.host_app_ask(agent=caller.agent, session=caller.session, questions=arguments.get("questions"))
            if ask is None:
                return apps.tool_result("no ask with these questions in this conversation yet", {"ask": None})
            prefetch_related_objects([ask], "respondents")
            return apps.tool_result(f"ask {ask.id}: {ask.status}", {"ask": services.host_app_view(ask)})
        outcome = services.host_app_answer(agent=caller.agent, session=caller.session,
                                           ask_id=arguments.get("askId"), answers=arguments.get("answers"))
    except AskcardsError as exc:
        return apps.tool_error(exc.message)
    if outcome.reason is services.AnswerRefusal.INVALID:  # "invalid: <what is wrong>", as the panel is told
        return apps.tool_error(web.refusal_error(outcome.reason, outcome.detail))
    ask = outcome.ask
    structured = {"accepted": outcome.accepted, "status": ask.status, "reason": ask.reason or None}
    if outcome.reason is not None:
        structured["error"] = web.refusal_error(outcome.reason, outcome.detail)
    text = f"ask {ask.id} answered" if outcome.accepted else f"ask {ask.id} was not open: {ask.status} ({ask.reason})"
    return apps.tool_result(text, structured)


async def list_resources(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[apps.resource()] if shows_apps(ctx) else [])


async def read_resource(ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    if params.uri == apps.APP_URI and shows_apps(ctx):
        return apps.read_result()
    # The URI whole in the error's data (SEP-2164); the request that carried it was bounded.
    raise invalid(f"Unknown resource: {params.uri[:200]}", data={"uri": params.uri})


async def list_resource_templates(ctx: ServerRequestContext[Any, Any],
                                  params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
    """None: the one resource (the MCP App) has a fixed URI. Answered, since resources are declared."""
    return types.ListResourceTemplatesResult(resource_templates=[])
