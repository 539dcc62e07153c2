"""The MCP server: the official SDK's low-level ``Server`` with askcards' handlers.

- ``tools/list``: the session's tools, as ``GET /api/v1/sessions/{id}/tools`` lists them, each
  declaring ``execution.taskSupport: optional``.
- ``tools/call``: ``services.tool_call``, as ``POST /api/v1/tools/call`` runs it. A blocking tool's
  call keeps its response stream open until the ask ends (its deadline at most), parked in the
  process's hub (``askcards.hub``) like the REST long-polls: no thread and no database connection while it waits,
  progress notifications every ``PROGRESS_SECONDS`` when the request carried a ``progressToken``.
  ``notifications/cancelled`` for that request cancels the ask (``by_agent``); a dropped
  connection cancels nothing.
- Tasks (2025-11-25): a ``tools/call`` with ``params.task`` answers at once with the ask as a
  working task; ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` read the
  database, so any process answers them, across restarts, for the calling agent only.
- Tasks (2026-07-28, the ``io.modelcontextprotocol/tasks`` extension, advertised under
  ``capabilities.extensions``): the server decides, so a ``tools/call`` that makes an ask answers
  with its task (``resultType: "task"``) whenever the request's ``_meta`` client capabilities
  declare the extension, once the ask row is committed. ``tasks/get`` (the ended task's result
  inline), ``tasks/update`` and ``tasks/cancel`` (acknowledgements) read and write the database
  like the 2025-11-25 ones; a request that does not declare the extension gets -32021 for them,
  and ``tasks/result`` / ``tasks/list`` (gone from this revision) are -32601.

- The host as a surface (``host=ask``): an open ask also put to the MCP client's own user as a
  form elicitation — on 2026-07-28 as ``input_required`` (``tasks/get``; a blocking call's two
  rounds), on the handshake revisions as ``elicitation/create`` on the waiting request's stream
  (``askcards.mcp.host``, whose response POST any process takes).

Every request is served statelessly (the SDK's stateless Streamable HTTP mode, and the
2026-07-28 revision, which is stateless by design): the agent comes from the Bearer key and the
session from the URL on every request, so any process of a scale-out serves any request.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import nullcontext, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from django.db.models import Q, prefetch_related_objects
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, JSONRPCRequest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from askcards import events, selectors, services, tools
from askcards.api.leases import KEEPER
from askcards.db import in_pool
from askcards.errors import AskcardsError, NotFound, QuotaExceeded
from askcards.hosts import prompt_tool
from askcards.models import Agent, Ask
from askcards.tools.host_prompts import HostEventError

from . import apps, host, results, tracing
from .caller import Caller, caller_for
from .exchange import OUTBOUND

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

PROGRESS_SECONDS = 10  # progress notifications while a call waits (at least every 15 s, as promised)
DEADLINE_GRACE_SECONDS = 30  # the worker expires an ask within ~2 s of its deadline; wait this long past it
TASKS_PAGE_SIZE = 50
TASKS_VERSION = "2025-11-25"  # the protocol revision whose core carries tasks
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"  # where tasks live from 2026-07-28 on
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
EXTENSION_TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
CORE_ONLY_TASK_METHODS = frozenset({"tasks/result", "tasks/list"})  # 2025-11-25 only
HOST_TOOL = "ask_user_questions"  # the blocking tool whose call asks the host in two rounds (host=ask, 2026-07-28)
HOST_TOOLS = frozenset({HOST_TOOL, tools.dingtalk_ask_user_question.NAME})  # the tools whose asks the host can show
CANCEL_HANDLING_SECONDS = 10
QUOTA_EXCEEDED = -32000  # JSON-RPC's implementation-defined server errors: a quota of the agent's is used up
CANCEL = "askcards.mcp_cancel"  # hub message: notifications/cancelled for a parked call

INSTRUCTIONS = (
    "askcards asks people structured questions (forms on Feishu, DingTalk or a web panel) and "
    "returns their answers. ask_user_questions waits until someone answers or its deadline passes; "
    "dingtalk_ask_user_question returns at once and its answer arrives later."
)

_caller: ContextVar[Caller] = ContextVar("askcards_mcp_caller")


class AskcardsServer(Server[Any]):
    """The SDK's server, advertising the 2025-11-25 tasks capability it has no built-in support for."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        capabilities.tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
        )
        return capabilities


def build_server() -> AskcardsServer:
    server = AskcardsServer(
        "askcards",
        version="1",
        title="askcards",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, tasks_get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, tasks_result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, tasks_cancel)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, tasks_list)
    server.add_request_handler("tasks/update", types.RequestParams, tasks_update)
    server.extensions[TASKS_EXTENSION] = {}
    server.extensions[apps.EXTENSION_ID] = {}
    server.add_notification_handler("notifications/cancelled", types.CancelledNotificationParams, cancelled)
    server.middleware[:] = [tracing.when_traced(middleware) for middleware in server.middleware]
    server.middleware.append(with_caller)
    return server


def _invalid(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message)


# ------------------------------------------------------------------------------------ the caller


def with_caller(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Coroutine[Any, Any, HandlerResult]:
    """Middleware: resolve the caller (agent and the URL's session) for every request, then serve
    it; a task-augmented ``tools/call`` is answered here with its task (the SDK's ``tools/call``
    result shape has no room for one). A plain function handing back the awaitable it picked: no
    frame of its own in the chain of a parked call."""
    if ctx.request_id is None:
        if ctx.method != "notifications/cancelled":
            return cast(Coroutine[Any, Any, HandlerResult], call_next(ctx))
        return _cancel_notification(ctx, call_next)
    return _serve_caller(ctx, call_next)


async def _cancel_notification(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    # Stateless HTTP answers a notification's POST (202) and ends its transport at once, which
    # would cancel this handler half-way: it finishes shielded (bounded) instead.
    with anyio.move_on_after(CANCEL_HANDLING_SECONDS, shield=True):
        return await _serve_caller(ctx, call_next)
    return None


async def _serve_caller(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    try:
        scope = ctx.request.scope if ctx.request is not None else {}
        agent = scope.get("askcards.agent")
        if agent is None:  # not through askcards.mcp.app (which authenticates every request)
            raise MCPError(code=INTERNAL_ERROR, message="unauthenticated request")
        try:
            caller = await in_pool(caller_for, agent, scope.get("query_string", b""))
        except AskcardsError as exc:
            if ctx.request_id is None:
                return None
            raise _invalid(exc.message) from None
        token = _caller.set(caller)
        try:
            params = ctx.params or {}
            if ctx.method == "tools/call" and not _app_tool(params.get("name")):
                if ctx.protocol_version == TASKS_VERSION and isinstance(params.get("task"), dict):
                    return await call_as_task(ctx, caller, params)
                # The permission prompt stays a blocking call: its host waits on it for the decision.
                if declares_tasks(ctx) and not (caller.permission_prompt and params.get("name") == prompt_tool.NAME):
                    return await call_as_task(ctx, caller, params, extension=True)
            elif ctx.method in EXTENSION_TASK_METHODS | CORE_ONLY_TASK_METHODS | {"tasks/update"}:
                _check_task_method(ctx)
            del scope, agent, caller, params  # the handler reads the caller from _caller
            return await call_next(ctx)
        finally:
            _caller.reset(token)
    except (MCPError, ValidationError):
        raise  # the protocol's own errors, already worded for the client
    except Exception:
        # A bug or an outage (the database gone): the traceback goes to the log, and the client
        # gets a generic error, not the exception's text (the SDK would send it verbatim).
        logger.exception("MCP %s failed", ctx.method)
        raise MCPError(code=INTERNAL_ERROR, message="internal error; the server log has the details") from None


def modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this 2026-07-28 request's own client capabilities (``_meta``) declare the tasks
    extension: the only thing that lets the server answer it with a task."""
    if not modern(ctx):
        return False
    meta = (ctx.params or {}).get("_meta") or {}
    capabilities = meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


CLIENT_SCOPE = "askcards.client"  # apps.Declared, set by askcards.mcp.app from a verified Mcp-Session-Id


def _declared(ctx: ServerRequestContext[Any, Any]) -> apps.Declared:
    """What this handshake-era request's client declared at ``initialize`` (its signed session id)."""
    scope = ctx.request.scope if ctx.request is not None else {}
    found = scope.get(CLIENT_SCOPE)
    return found if isinstance(found, apps.Declared) else apps.Declared()


def declares_form_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client shows form elicitations: on 2026-07-28 its own ``_meta``
    client capabilities say so (``elicitation: {}`` means form, as the spec reads an empty
    object); on the handshake revisions its ``initialize`` did (``askcards.mcp.apps``)."""
    if not modern(ctx):
        return _declared(ctx).forms
    meta = (ctx.params or {}).get("_meta") or {}
    return apps.client_declares_forms(meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None)


def _app_tool(name: Any) -> bool:
    """An app-only tool's call is answered at once, never as a task."""
    return isinstance(name, str) and name in apps.APP_TOOLS


def shows_apps(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client renders MCP Apps: on 2026-07-28 its own ``_meta`` client
    capabilities say so; on the handshake revisions its ``initialize`` did, as the
    ``Mcp-Session-Id`` askcards answered it with records (``askcards.mcp.apps``)."""
    if modern(ctx):
        meta = (ctx.params or {}).get("_meta") or {}
        return apps.client_declares_apps(meta.get(CLIENT_CAPABILITIES_META) if isinstance(meta, Mapping) else None)
    return _declared(ctx).apps


def _host_form(ctx: ServerRequestContext[Any, Any], caller: Caller, ask: Ask, *,
               task: bool = False) -> dict[str, Any] | None:
    """The form elicitation putting this open ask to the host's own user on this request, or None:
    the URL opts in (``host=ask``), the client shows form elicitations, the ask is one person's
    (a question form, or an ordinary DingTalk card) and its form can be expressed on this
    revision (``askcards.tools.host_form``). ``task``: for a 2025-11-25 task's ``tasks/result``."""
    if not (caller.host_ask and ask.is_open and ask.target_type == Ask.Target.NONE
            and ask.tool in HOST_TOOLS and declares_form_elicitation(ctx)):
        return None
    return host.elicitation(ask, ctx.protocol_version, task=task)


AskHost = Callable[[str], Awaitable[None]]


def _host_asker(ctx: ServerRequestContext[Any, Any], caller: Caller, *, task: bool = False) -> AskHost | None:
    """On the handshake revisions, what puts an open ask (by id) to the host's own user from a
    waiting request: an ``elicitation/create`` on this request's stream (``askcards.mcp.host``),
    whose response comes back as a POST of its own. None where no request can go out (2026-07-28,
    a request askcards does not frame itself, a client that declared no form elicitation).

    The form is made from the ask as read when it is sent (a parked call holds no row of its ask),
    and let go once sent."""
    scope = ctx.request.scope if ctx.request is not None else {}
    outbound = scope.get(OUTBOUND)
    if modern(ctx) or outbound is None or not caller.host_ask or not declares_form_elicitation(ctx):
        return None

    async def ask_host(ask_id: str) -> None:
        put = await in_pool(_host_request, ctx, caller, ask_id, task)
        if put is not None:
            await outbound(put)

    return ask_host


def _host_request(ctx: ServerRequestContext[Any, Any], caller: Caller, ask_id: str, task: bool) -> JSONRPCRequest | None:
    """The ``elicitation/create`` putting the ask to the host as it is now (read here, in the
    pool), or None when it is not put (it has ended, or its form cannot be expressed)."""
    ask = selectors.ask_get(agent=caller.agent, ask_id=ask_id)
    params = _host_form(ctx, caller, ask, task=task)
    if params is None:
        return None
    return JSONRPCRequest(jsonrpc="2.0", id=host.request_id(ask), method="elicitation/create", params=params)


def _check_task_method(ctx: ServerRequestContext[Any, Any]) -> None:
    """Which task methods each revision has: 2025-11-25 its core four (no ``tasks/update``);
    2026-07-28 the extension's three, and only for a request that declares the extension."""
    if not modern(ctx):
        if ctx.method == "tasks/update":
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found: tasks/update is the 2026-07-28 tasks extension's")
        return
    if ctx.method in CORE_ONLY_TASK_METHODS:
        raise MCPError(code=METHOD_NOT_FOUND, message=f"Method not found: {ctx.method} is not in the 2026-07-28 tasks extension")
    if not declares_tasks(ctx):
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=f"Missing required client capability: declare the {TASKS_EXTENSION} extension in this request's "
                    f"_meta[{CLIENT_CAPABILITIES_META!r}] to use {ctx.method}",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


# ---------------------------------------------------------------------------------------- tools


async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    caller = _caller.get()
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
        raise _invalid(f"_meta[{results.CALL_ID_META!r}] must be a string of 1 to 200 characters")
    timeout = meta.get(results.TIMEOUT_META)
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)):
        raise _invalid(f"_meta[{results.TIMEOUT_META!r}] must be a whole number of seconds")
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
        raise _invalid(exc.message) from None


async def _made(ctx: ServerRequestContext[Any, Any], caller: Caller, name: str, arguments: Any) -> services.ToolCallOutcome:
    """``_run``, finished even if the client goes away meanwhile: an open ask it made for a
    blocking call then gets the lease of a call that left, the grace period, as if it had parked
    and left. Else the ask, leased by nobody, would stay open for a person to answer into a void
    until its deadline."""

    async def left(outcome: services.ToolCallOutcome) -> None:
        if outcome.ask is not None and outcome.ask.is_open and outcome.ask.blocking:
            await in_pool(services.caller_left, ask_id=outcome.ask.id, parked=False)

    return await _despite_leaving(_run(ctx, caller, name, arguments), left)


async def _despite_leaving(making: Awaitable[_T], left: Callable[[_T], Awaitable[None]]) -> _T:
    """What ``making`` makes (an ask, in the pool), finished even if the client goes away meanwhile
    (its request cancelled: the pool goes on making it anyway); then ``left`` is given it before
    the cancellation goes on, so that what was made for a waiter that is gone is let go."""
    run = asyncio.ensure_future(making)
    try:
        return await asyncio.shield(run)
    except asyncio.CancelledError:
        with anyio.CancelScope(shield=True), suppress(Exception):
            await left(await run)
        raise


def _quota_refusal(exc: QuotaExceeded) -> services.ToolCallOutcome:
    """A tool call over one of the agent's quotas: a tool error the model and its host read (the
    REST API's 429 message, with the seconds to wait), no ask made."""
    text = json.dumps({"error": exc.message, "reason": exc.code, "retry_after": exc.retry_after}, ensure_ascii=False)
    return services.ToolCallOutcome("failed", text, None, False)


def _call_result(status: str, text: str | None, ask: Ask | None) -> types.CallToolResult:
    # The model fills what each protocol revision requires of it (2026-07-28: resultType).
    return types.CallToolResult.model_validate(results.tool_result(status, text, ask), by_name=False)


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
    caller = _caller.get()
    if _app_tool(params.name) and shows_apps(ctx):
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
            return _call_result(outcome.status, outcome.tool_result, None)
    async with events.Waiter("MCP call") as waiter:
        if tool is not None and tool.blocking and ctx.request_id is not None:
            # Before the ask exists: a cancel that arrives while it is being made waits in the queue.
            await waiter.add(cancel_key(caller, ctx.request_id))
        outcome = await _made(ctx, caller, params.name, params.arguments)
        if outcome.ask is None:
            return _call_result(outcome.status, outcome.tool_result, None)
        _release_arguments(ctx, params)
        status, text, ask_id = outcome.status, outcome.tool_result, outcome.ask.id
        parks = outcome.ask.is_open and outcome.ask.blocking
        del outcome  # a parked call holds no row while it waits, the ask it made included
        # The ended ask's result counts as returned in the same trip to the pool as its read.
        if parks:
            ask = await _park(ctx, caller, ask_id, waiter, lease=True, returned=True, ask_host=_host_asker(ctx, caller))
            if ask.is_open:
                text = (
                    f"the ask {ask.id} is still open past its deadline (is the askcards worker running?); "
                    "read it later with tasks/get or GET /api/v1/asks/{id}"
                )
                return _call_result(Ask.Status.FAILED, text, ask)
        else:
            ask = await in_pool(_read, caller.agent, ask_id, returned=True)
    if not ask.blocking:  # the DingTalk tool answers at once; its later outcome is its task's
        return _call_result(status, text, ask)
    return _call_result(ask.status, (ask.result or {}).get("tool_result"), ask)


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
    ``elicitation/create``: ``_host_asker``.)
    The first round makes the ask (on every surface, as always) and answers ``input_required``
    with the host surface's form and a signed ``requestState`` naming the ask — the only state
    kept between rounds. The retry carries the host's response (``inputResponses``) and that
    state: the response answers the ask (or declines it) unless another surface answered first,
    and the call returns the ask's result. An ask still open then (the response did not answer
    the form) is asked again."""
    if params.request_state is None:
        outcome = await _made(ctx, caller, params.name, params.arguments)
        if outcome.ask is None:
            return _call_result(outcome.status, outcome.tool_result, None)
        ask = await in_pool(_read, caller.agent, outcome.ask.id)
    else:
        ask_id = results.request_state_ask(params.request_state, agent_id=caller.agent.pk)
        if ask_id is None:
            raise _invalid("requestState is not one this server issued for this agent, or it has expired; "
                           "call again without it")
        ask = await _task_ask(ask_id)
        response = (params.input_responses or {}).get(results.host_request_key(ask))
        if response is not None and ask.is_open:
            await in_pool(_host_answered, caller, ask, response)
            ask = await _task_ask(ask_id)
    form = _host_form(ctx, caller, ask)
    if form is not None:
        return results.host_input_required(ask, form)
    if ask.is_open:  # never for a question form on 2026-07-28, which the schema always expresses
        raise MCPError(code=INTERNAL_ERROR, message=f"ask {ask.id} cannot be put to the host; read it with tasks/get")
    await in_pool(services.ask_result_returned, ask=ask)
    return _call_result(ask.status, (ask.result or {}).get("tool_result"), ask)


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
        ask_id = await _despite_leaving(
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
                await _park(ctx, caller, ask_id, waiter)
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
        raise _invalid("invalid tools/call params: expected {name, arguments?, task: {ttl?}}") from None
    outcome = await _run(ctx, caller, params.name, params.arguments)
    if outcome.ask is None:
        if extension:
            return _call_result(outcome.status, outcome.tool_result, None)
        return results.tool_result(outcome.status, outcome.tool_result, None)
    ask = await in_pool(_read, caller.agent, outcome.ask.id)
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
    if outcome.error.startswith("invalid"):
        return apps.tool_error(outcome.error)  # "invalid: <what is wrong>", as the panel is told
    ask = outcome.ask
    structured = {"accepted": outcome.accepted, "status": ask.status, "reason": ask.reason or None}
    if outcome.error:
        structured["error"] = outcome.error
    text = f"ask {ask.id} answered" if outcome.accepted else f"ask {ask.id} was not open: {ask.status} ({ask.reason})"
    return apps.tool_result(text, structured)


async def list_resources(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[apps.resource()] if shows_apps(ctx) else [])


async def read_resource(ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    if params.uri == apps.APP_URI and shows_apps(ctx):
        return apps.read_result()
    raise _invalid(f"Unknown resource: {params.uri[:200]}")


# ---------------------------------------------------------------------------------------- waiting


def _read(agent: Agent, ask_id: str, *, returned: bool = False) -> Ask:
    """The ask with its session and respondents read (in the pool: results are built from them
    on the event loop, where the ORM may not run). ``returned``: an ended ask's result is about to
    go back to the caller, and counts as returned (``services.ask_result_returned``)."""
    ask = selectors.with_respondents(selectors.ask_get(agent=agent, ask_id=ask_id))
    if returned and not ask.is_open:
        services.ask_result_returned(ask=ask)
    return ask


def cancel_key(caller: Caller, request_id: Any) -> str:
    """The hub key of one parked ``tools/call``: its agent, session and JSON-RPC id
    (``1`` and ``"1"`` differ). Stateless HTTP has no connection identity, so two clients sharing
    a session and an in-flight request id share it too."""
    digest = hashlib.sha256(f"{caller.session.pk}|{request_id!r}".encode()).hexdigest()[:40]
    return f"mcp.{caller.agent.pk}.{digest}"


async def _park(ctx: ServerRequestContext[Any, Any], caller: Caller, ask_id: str, waiter: events.Waiter,
                *, lease: bool = False, returned: bool = False, ask_host: AskHost | None = None) -> Ask:
    """Wait until the ask ends or its deadline (plus grace) passes; returns it as it is then.

    Parked in the hub (the ask's key, and the cancel key the caller may have added):
    woken by the ask's changes, it re-reads the ask in the pool; sends progress meanwhile. While
    the bus is down it re-reads every ``events.LAYER_RETRY_SECONDS`` instead (the waiter's
    ``REREAD``), as the REST long-polls do.

    A blocking ``tools/call`` (``lease``) holds the ask's lease while it waits
    (``services.waiters``). When its handler is cancelled (the client went away) the lease runs
    the grace period: a re-call with the same ``call_id`` or a task read takes it back, else the
    worker cancels the ask (``caller_gone``). Without a lease (``tasks/result``) a cancelled
    handler leaves the ask as it is: a task is read later by design.

    ``ask_host`` (handshake revisions, ``host=ask``): the open ask is also put to the host's own
    user on this request's stream once parked, and again when their response did not answer the
    form (``host.ASK_AGAIN``). Their response comes back elsewhere and wakes this call as any
    answer does; the lease is held meanwhile, so a client gone mid-form ends ``caller_gone``.

    ``returned``: the ask it returns ended, its result counts as returned (``_read``)."""
    with services.parked_wait(caller.agent.pk):
        try:
            with KEEPER.holding(ask_id) if lease else nullcontext():
                await waiter.add(events.ask_key(ask_id))
                # After subscribing: no change can slip by.
                state = await (_leased_state(caller.agent, ask_id, returned) if lease
                               else in_pool(_state, caller.agent, ask_id, returned=returned))
                if not isinstance(state, _Waiting):
                    return state
                if ask_host is not None:
                    await ask_host(ask_id)
                loop = asyncio.get_running_loop()
                give_up = loop.time() + max(0.0, (state.deadline - timezone.now()).total_seconds()) + DEADLINE_GRACE_SECONDS
                total = max(1.0, (state.deadline - state.created_at).total_seconds())
                next_progress = loop.time()
                while isinstance(state, _Waiting):
                    now = loop.time()
                    if now >= next_progress:
                        elapsed = (timezone.now() - state.created_at).total_seconds()
                        await ctx.session.report_progress(min(elapsed, total), total, state.message)
                        next_progress = now + PROGRESS_SECONDS
                    if now >= give_up:
                        return await in_pool(_read, caller.agent, ask_id)  # still open: as it is now
                    message = await waiter.receive(min(next_progress, give_up) - now)
                    if message is None:
                        continue
                    state = await in_pool(_state, caller.agent, ask_id, cancel=message.get("type") == CANCEL,
                                          returned=returned)
                    if message.get("type") == host.ASK_AGAIN and ask_host is not None and isinstance(state, _Waiting):
                        await ask_host(ask_id)
                return state
        except BaseException:
            if lease:  # once the lease is no longer refreshed by this call
                with anyio.CancelScope(shield=True):
                    await in_pool(services.caller_left, ask_id=ask_id)
            raise


@dataclass(frozen=True, slots=True)
class _Waiting:
    """What a parked call keeps of its open ask while it waits, instead of the row (with its
    session, respondents and questions): when it was made and is due, and what the progress
    notifications say (as of the last read; every wake reads the ask again)."""

    created_at: datetime
    deadline: datetime
    message: str

    @classmethod
    def of(cls, ask: Ask) -> _Waiting:
        return cls(ask.created_at, ask.deadline, results.waiting_message(ask))


def _state(agent: Agent, ask_id: str, *, lease: bool = False, cancel: bool = False,
           returned: bool = False) -> Ask | _Waiting:
    """The ask once it has ended, else what its wait keeps (``_Waiting``). ``lease``: the waiter
    takes the ask's lease first; ``cancel``: the caller's ``notifications/cancelled`` arrived,
    the ask is cancelled (``by_agent``) if still open; ``returned``: as ``_read``'s."""
    if lease:
        services.waiter_parked(ask_id=ask_id)
    ask = _read(agent, ask_id, returned=returned)
    if cancel and ask.is_open:
        services.ask_cancel(ask=ask, reason=Ask.Reason.BY_AGENT, actor=f"agent:{agent.name}")
        ask = _read(agent, ask_id, returned=returned)
    return _Waiting.of(ask) if ask.is_open else ask


async def _leased_state(agent: Agent, ask_id: str, returned: bool) -> Ask | _Waiting:
    """``_state`` taking the lease, finished even if the client goes away meanwhile: the lease it
    takes must be in place before _park's caller_left shortens it to the grace period, not land
    after it."""
    read = asyncio.ensure_future(in_pool(_state, agent, ask_id, lease=True, returned=returned))
    try:
        return await asyncio.shield(read)
    except asyncio.CancelledError:
        with suppress(Exception):
            await read
        raise


async def cancelled(ctx: ServerRequestContext[Any, Any], params: types.CancelledNotificationParams) -> None:
    """``notifications/cancelled``: tell the parked call (on whichever process holds it) to cancel
    its ask. Stateless HTTP brings this notification in its own POST, often to another process."""
    caller = _caller.get(None)
    if caller is None or params.request_id is None:
        return
    # With the bus down (Redis stopped), a cancel for a call parked on another process is lost
    # (logged once per outage): the call's ask
    # then ends as it would have (answer, deadline), and the notification itself never errors.
    events.publish([(cancel_key(caller, params.request_id), {"type": CANCEL})])


# ------------------------------------------------------------------------------------------ tasks


def _polled(agent: Agent, task_id: str) -> Ask:
    """The ask a task request names; a client reading it as a task is there for it (a blocking
    call's lease, if it has one, runs on: ``services.caller_polled``)."""
    ask = _read(agent, task_id)
    services.caller_polled(ask=ask)
    return ask


async def _task_ask(task_id: str) -> Ask:
    try:
        return await in_pool(_polled, _caller.get().agent, task_id)
    except NotFound:
        raise _invalid(f"no task {task_id!r} (a task id is the id of one of this agent's asks, like q_<32 hex>)") from None


async def tasks_get(ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
    ask = await _task_ask(params.task_id)
    form = _host_form(ctx, _caller.get(), ask)
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
        raise _invalid("tasks/update needs params.taskId (a string) and params.inputResponses (an object)")
    if not isinstance(responses, Mapping):
        raise _invalid("tasks/update needs params.inputResponses (an object keyed by input request)")
    caller = _caller.get()
    ask = await _task_ask(task_id)
    response = responses.get(results.host_request_key(ask))
    if caller.host_ask and ask.is_open and ask.tool in HOST_TOOLS and response is not None:
        await in_pool(_host_answered, caller, ask, response)
    return {}


def _host_answered(caller: Caller, ask: Ask, response: Any) -> None:
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
        logger.info("ask %s: the host's response not taken (%s)", ask.id, outcome.why)


async def tasks_result(ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
    """Blocks until the task ends (its deadline at most), then hands over its result; a status
    notification goes out on this stream when it ends."""
    ask = await _task_ask(params.task_id)
    if ask.is_open:
        try:
            services.quota_check_parked(agent=_caller.get().agent)
        except QuotaExceeded as exc:
            raise MCPError(code=QUOTA_EXCEEDED, message=f"{exc.message} (retry after {exc.retry_after} s)") from None
        task_id = ask.id
        del ask  # a parked call holds no row while it waits
        async with events.Waiter("MCP call") as waiter:
            ask_host = _host_asker(ctx, _caller.get(), task=True)
            # The ended task's result counts as returned in the same trip to the pool as its read.
            ask = await _park(ctx, _caller.get(), task_id, waiter, returned=True, ask_host=ask_host)
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
    caller = _caller.get()
    ask = await _task_ask(params.task_id)
    cancelled_now = await in_pool(services.ask_cancel, ask=ask, reason=Ask.Reason.BY_AGENT, actor=f"agent:{caller.agent.name}")
    if modern(ctx):
        return {}  # the extension's cancel is an acknowledgement, whether or not the task had ended
    ask = await _task_ask(params.task_id)
    if not cancelled_now:
        raise _invalid(f"task {ask.id} has already ended ({ask.status}, {ask.reason}); nothing was cancelled")
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
        raise _invalid("invalid tasks/list cursor: pass the nextCursor of the previous page, or no cursor for the first")
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
    return await in_pool(_tasks_page, _caller.get().agent, params.cursor)
