"""The MCP server: the official SDK's low-level ``Server`` with askcards' handlers.

- ``tools/list``: the session's tools, as ``GET /api/v1/sessions/{id}/tools`` lists them, each
  declaring ``execution.taskSupport: optional``.
- ``tools/call``: ``services.tool_call``, as ``POST /api/v1/tools/call`` runs it. A blocking tool's
  call keeps its response stream open until the ask ends (its deadline at most), parked in the
  process's hub (``askcards.wake.hub``) like the REST long-polls: no thread and no database connection while it waits,
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

import logging
from collections.abc import Coroutine
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from askcards.db import in_pool
from askcards.errors import AskcardsError
from askcards.hosts import prompt_tool

from . import apps, tracing
from .caller import caller_for
from .context import CALLER, CANCEL_HANDLING_SECONDS, CORE_ONLY_TASK_METHODS, EXTENSION_TASK_METHODS, TASKS_EXTENSION, TASKS_VERSION, app_tool, check_task_method, declares_tasks, invalid
from .waiting import cancelled
from .tasks import tasks_cancel, tasks_get, tasks_list, tasks_result, tasks_update
from .calls import call_as_task, call_tool, list_resource_templates, list_resources, list_tools, read_resource


logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "askcards asks people structured questions (forms on Feishu, DingTalk or a web panel) and "
    "returns their answers. ask_user_questions waits until someone answers or its deadline passes; "
    "dingtalk_ask_user_question returns at once and its answer arrives later."
)


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
        on_list_resource_templates=list_resource_templates,
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
            raise invalid(exc.message) from None
        token = CALLER.set(caller)
        try:
            params = ctx.params or {}
            if ctx.method == "tools/call" and not app_tool(params.get("name")):
                if ctx.protocol_version == TASKS_VERSION and isinstance(params.get("task"), dict):
                    return await call_as_task(ctx, caller, params)
                # The permission prompt stays a blocking call: its host waits on it for the decision.
                if declares_tasks(ctx) and not (caller.permission_prompt and params.get("name") == prompt_tool.NAME):
                    return await call_as_task(ctx, caller, params, extension=True)
            elif ctx.method in EXTENSION_TASK_METHODS | CORE_ONLY_TASK_METHODS | {"tasks/update"}:
                check_task_method(ctx)
            del scope, agent, caller, params  # the handler reads the caller from CALLER
            return await call_next(ctx)
        finally:
            CALLER.reset(token)
    except (MCPError, ValidationError):
        raise  # the protocol's own errors, already worded for the client
    except Exception:
        # A bug or an outage (the database gone): the traceback goes to the log, and the client
        # gets a generic error, not the exception's text (the SDK would send it verbatim).
        logger.exception("MCP %s failed", ctx.method)
        raise MCPError(code=INTERNAL_ERROR, message="internal error; the server log has the details") from None
