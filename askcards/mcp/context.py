"""What a request to /mcp negotiated and who makes it: the caller of the request being served, the
protocol revision's and the client's declared capabilities (tasks, form elicitation, MCP Apps),
whether an ask can be put to the host's own user, and the constants the handlers share.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, JSONRPCRequest
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from askcards import selectors, tools
from askcards.db import in_pool
from askcards.models import Ask

from . import apps, host
from .caller import Caller
from .exchange import OUTBOUND


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

CALLER: ContextVar[Caller] = ContextVar("askcards_mcp_caller")


def invalid(message: str, data: Any = None) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message, data=data)


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


def app_tool(name: Any) -> bool:
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


def host_form(ctx: ServerRequestContext[Any, Any], caller: Caller, ask: Ask, *,
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


def host_asker(ctx: ServerRequestContext[Any, Any], caller: Caller, *, task: bool = False) -> AskHost | None:
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
    params = host_form(ctx, caller, ask, task=task)
    if params is None:
        return None
    return JSONRPCRequest(jsonrpc="2.0", id=host.request_id(ask), method="elicitation/create", params=params)


def check_task_method(ctx: ServerRequestContext[Any, Any]) -> None:
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
