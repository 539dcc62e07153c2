"""Who calls: the agent (its Bearer key) and the session its URL names.

An MCP client is configured with one URL and one header, so the URL names the session:
``/mcp?session=<key>``, plus optionally the fields of ``POST /api/v1/sessions`` (``platform``,
``web_user``, ``chat_type``, ``chat_id``, ``user_id``, ``user_name``, ``bot``) and ``sender_id``
(whom the asks are for, as in ``POST /api/v1/tools/call``). Every request upserts that session by
the same rules as the REST endpoint (key inference, grants, tools by platform); a request that
repeats what the session already holds writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from askcards.http import jsonlimits
from askcards import selectors, services
from askcards.api.serializers import SessionUpsertInput
from askcards.errors import InvalidInput, Unauthenticated
from askcards.models import Agent, Session

SESSION_FIELDS = ("platform", "web_user", "chat_type", "chat_id", "user_id", "user_name", "bot")
QUERY_FIELDS = ("session", *SESSION_FIELDS, "sender_id")
# ``/mcp`` only: ``permission_prompt=1`` also lists the headless permission-prompt tool
# (``askcards.hosts.prompt_tool``), for ``claude -p --permission-prompt-tool``; ``host=ask`` also
# puts the asks to the host's own user (an elicitation the MCP client shows: the host surface).
MCP_FIELDS = (*QUERY_FIELDS, "permission_prompt", "host")
SENDER_MAX_LENGTH = 200

HOW_TO_NAME = (
    "name the session in the URL: /mcp?session=<key>, for example "
    "/mcp?session=feishu-<botId>-private-<userId> (a Feishu private chat) or "
    "/mcp?session=my-task&platform=web&web_user=<username> (the web panel); "
    f"the URL may also give {', '.join(SESSION_FIELDS)} and sender_id, as POST /api/v1/sessions takes them"
)


class Unauthorized(Exception):
    """No valid agent key: HTTP 401 with ``WWW-Authenticate: Bearer``."""


@dataclass(frozen=True)
class Caller:
    agent: Agent
    session: Session
    sender_id: str
    permission_prompt: bool = False  # the URL asks for the permission-prompt tool
    host_ask: bool = False  # the URL asks for the host surface (host=ask)


def agent_for(authorization: str | None) -> Agent:
    """The agent whose key the ``Authorization`` header carries; Unauthorized otherwise."""
    try:
        return selectors.agent_for_authorization(authorization)
    except Unauthenticated as exc:
        raise Unauthorized(exc.message) from None


def query_fields(query_string: bytes, allowed: tuple[str, ...] = QUERY_FIELDS) -> dict[str, str]:
    """The URL's parameters; InvalidInput for an unknown or repeated one."""
    try:
        pairs = parse_qsl(query_string.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise InvalidInput("the URL's query string is not UTF-8") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            raise InvalidInput(f"unknown URL parameter {name!r}; expected: {', '.join(allowed)}")
        if name in fields:
            raise InvalidInput(f"URL parameter {name!r} is given twice")
        fields[name] = value
    return fields


def caller_for(agent: Agent, query_string: bytes) -> Caller:
    """The caller of one MCP request: its session upserted from the URL (sync: runs in the pool)."""
    fields = query_fields(query_string, MCP_FIELDS)
    flag = fields.pop("permission_prompt", None)
    if flag not in (None, "0", "1"):
        raise InvalidInput(f"permission_prompt must be 1 (list the permission-prompt tool) or 0, got {flag[:20]!r}")
    host = fields.pop("host", None)
    if host not in (None, "ask", "none"):
        raise InvalidInput(f"host must be ask (also ask the MCP client's own user) or none, got {host[:20]!r}")
    caller = caller_from(agent, fields)
    return Caller(caller.agent, caller.session, caller.sender_id, permission_prompt=flag == "1", host_ask=host == "ask")


def caller_from(agent: Agent, fields: dict[str, str], *, where: str = "MCP URL", path: str = "/mcp") -> Caller:
    """The caller a URL's parameters name (``/mcp``'s, an agent host hook's): its session upserted."""
    fields = dict(fields)
    how = HOW_TO_NAME.replace("/mcp?", f"{path}?")
    sender_id = fields.pop("sender_id", "")
    if len(sender_id) > SENDER_MAX_LENGTH:
        raise InvalidInput(f"sender_id is longer than {SENDER_MAX_LENGTH} characters")
    try:  # %00 in the URL: stored on the ask, where PostgreSQL refuses it (REST's sender_id refuses it too)
        jsonlimits.check_text(sender_id, "sender_id")
    except jsonlimits.JSONRefused as exc:
        raise InvalidInput(str(exc)) from None
    if not fields.get("session"):
        raise InvalidInput(f"this {where} names no session; {how}")
    data = {"key" if name == "session" else name: value for name, value in fields.items()}
    serializer = SessionUpsertInput(data=data)
    if not serializer.is_valid():
        problems = "; ".join(
            f"{'session' if name == 'key' else name}: {' '.join(str(m) for m in messages)}"
            for name, messages in serializer.errors.items()
        )
        raise InvalidInput(f"invalid session in the {where} ({problems}); {how}")
    values = dict(serializer.validated_data)
    if "bot" in values:
        values["bot"] = services.session_bot(agent=agent, app_id=values["bot"], platform=values.get("platform"), key=values["key"])
    session, _ = services.session_upsert(agent=agent, **values)
    return Caller(agent=agent, session=session, sender_id=sender_id)
