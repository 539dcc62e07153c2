"""What MCP clients read: an ask as a tool result and as a task (2025-11-25 tasks in the core
protocol; 2026-07-28 tasks in the ``io.modelcontextprotocol/tasks`` extension).

- A tool result's text content is the REST ``tool_result`` (the string the model reads) and its
  ``structuredContent`` the REST tool call's body ``{status, ask, tool_result}``. Asks that end
  without an answer (expired, failed, invalidated, cancelled) are ``isError``, their text saying
  why, as in REST.
- A task is an ask: task id = ask id. pending → ``working``; answered → ``completed``; expired,
  failed, invalidated → ``completed`` (its result ``isError`` with the reason); cancelled →
  ``cancelled``. The task's result is what the model reads once the ask has ended: the tool
  result of a blocking tool, and for the DingTalk tool (which answers at once) its later message.
- 2026-07-28 (the extension): the same task and status mapping, its durations named ``ttlMs`` and
  ``pollIntervalMs``; the task of a ``tools/call`` is flat (``resultType: "task"``), and
  ``tasks/get`` inlines an ended task's tool result (no ``related-task`` key: the task id is at
  the root).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core import signing

from askcards import selectors
from askcards.models import Ask
from askcards.tools import ERROR_TEXTS
from askcards.tools import host_form as host_form_module

CALL_ID_META = "io.askcards/call_id"
TIMEOUT_META = "io.askcards/timeout_seconds"
ASK_ID_META = "io.askcards/ask_id"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"

POLL_INTERVAL_MS = 5000
ERROR_STATUSES = frozenset({Ask.Status.EXPIRED, Ask.Status.FAILED, Ask.Status.INVALIDATED, Ask.Status.CANCELLED})
TASK_STATUS: dict[str, str] = {
    Ask.Status.RESERVED: "working",
    Ask.Status.PENDING: "working",
    Ask.Status.ANSWERED: "completed",
    Ask.Status.EXPIRED: "completed",
    Ask.Status.FAILED: "completed",
    Ask.Status.INVALIDATED: "completed",
    Ask.Status.CANCELLED: "cancelled",
}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def tool_result(status: str, text: str | None, ask: Ask | None) -> dict[str, Any]:
    """A ``CallToolResult`` (wire shape) for a tool call's outcome."""
    data = selectors.ask_data(ask) if ask is not None else None
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": text or ""}],
        "structuredContent": {"status": status, "ask": data, "tool_result": text},
        "isError": status in ERROR_STATUSES,
    }
    if ask is not None:
        result["_meta"] = {ASK_ID_META: ask.id}
    return result


def task_result(ask: Ask) -> dict[str, Any]:
    """The tool result a finished task hands over (``tasks/result``)."""
    stored = ask.result or {}
    text = stored.get("message") or stored.get("tool_result")
    if text is None:  # answers purged after the retention period, or an ask without a result text
        text = ERROR_TEXTS.get(ask.reason, ask.reason)
    result = tool_result(ask.status, text, ask)
    result["_meta"][RELATED_TASK_META] = {"taskId": ask.id}
    return result


def waiting_message(ask: Ask) -> str:
    """Where the question waits and for whom (progress notifications, a working task's status)."""
    people = [r.respondent_id for r in ask.respondents.all() if r.status == "pending"] or [
        ask.session.user_name or ask.session.user_id or ask.session.web_user or ask.sender_id
    ]
    who = ", ".join(p for p in people if p) or "anyone in the chat"
    where = ", ".join(ask.surfaces) or "no surface yet"
    return f"waiting for {who} to answer on {where} (ask {ask.id}, deadline {_iso(ask.deadline)})"


def status_message(ask: Ask) -> str:
    if ask.is_open:
        return waiting_message(ask)
    if ask.status == Ask.Status.ANSWERED:
        return f"answered ({ask.reason})"
    return f"{ask.status}: {ERROR_TEXTS.get(ask.reason, ask.reason)}"


def ttl_ms(ask: Ask) -> int:
    """How long the task stays readable from its creation: until its deadline, and its answers
    for the retention period after that (the ask row itself is kept)."""
    retention = getattr(settings, "ASKCARDS_ANSWER_RETENTION_DAYS", 30) * 86400
    return int(((ask.deadline - ask.created_at).total_seconds() + retention) * 1000)


def task(ask: Ask) -> dict[str, Any]:
    """The ask as a 2025-11-25 ``Task`` (wire shape)."""
    updated = ask.closed_at or ask.activated_at or ask.created_at
    return {
        "taskId": ask.id,
        "status": TASK_STATUS[ask.status],
        "statusMessage": status_message(ask),
        "createdAt": _iso(ask.created_at),
        "lastUpdatedAt": _iso(updated),
        "ttl": ttl_ms(ask),
        "pollInterval": POLL_INTERVAL_MS,
    }


def extension_task(ask: Ask) -> dict[str, Any]:
    """The ask as a 2026-07-28 tasks-extension ``Task``: the 2025-11-25 task, its durations
    renamed (``ttlMs``, ``pollIntervalMs``: integer milliseconds)."""
    data = task(ask)
    data["ttlMs"] = data.pop("ttl")
    data["pollIntervalMs"] = data.pop("pollInterval")
    return data


def created_task(ask: Ask) -> dict[str, Any]:
    """A task-augmented ``tools/call``'s ``CreateTaskResult`` (2026-07-28): flat, ``resultType``
    ``"task"``."""
    return {"resultType": "task", **extension_task(ask), "_meta": {ASK_ID_META: ask.id}}


def host_form(ask: Ask, *, legacy: bool = False) -> dict[str, Any] | None:
    """The ``elicitation/create`` params putting this ask to the host's own user, or None when the
    elicitation schema cannot express its form (``askcards.tools.host_form``). ``legacy``: the
    2025-06-18 schema."""
    return host_form_module.elicitation(tool=ask.tool, questions=ask.questions, fields=ask.fields,
                                        title=ask.title, description=ask.description, legacy=legacy)


def host_request_key(ask: Ask) -> str:
    """The key of the one input request a task puts to the host: unique to the ask, never reused
    (an answer, a decline or a dismissal ends the ask)."""
    return f"askcards-answer-{ask.id}"


def host_input_task(ask: Ask, params: dict[str, Any]) -> dict[str, Any]:
    """``tasks/get``'s ``InputRequiredTask`` (2026-07-28) for an open ask also put to the host's
    own user: its form as an elicitation (``params``, from ``host_form``)."""
    data = extension_task(ask)
    data["status"] = "input_required"
    data["inputRequests"] = {host_request_key(ask): {"method": "elicitation/create", "params": params}}
    return data


REQUEST_STATE_SALT = "askcards.mcp.request-state"
REQUEST_STATE_MAX_AGE = 14 * 86400  # past the longest deadline an ask can have (13 days)


def host_input_required(ask: Ask, params: dict[str, Any]) -> dict[str, Any]:
    """A blocking call's ``InputRequiredResult`` (2026-07-28 multi round-trip): the host surface's
    form, and a ``requestState`` naming the ask, signed (``django.core.signing``: HMAC with the
    site's secret, compared in constant time) so a client cannot point its retry at another ask."""
    task = host_input_task(ask, params)
    state = signed_ask(ask, salt=REQUEST_STATE_SALT)
    return {"resultType": "input_required", "inputRequests": task["inputRequests"], "requestState": state}


def request_state_ask(state: Any, *, agent_id: int) -> str | None:
    """The ask a retry's ``requestState`` names, if this server signed it for this agent."""
    return ask_signed(state, salt=REQUEST_STATE_SALT, agent_id=agent_id)


def signed_ask(ask: Ask, *, salt: str) -> str:
    """A token naming ``ask`` and its agent, signed for one use (``salt``) with the site's secret."""
    return signing.dumps({"ask": ask.id, "agent": ask.agent_id}, salt=salt, compress=False)


def ask_signed(value: Any, *, salt: str, agent_id: int, max_age: int = REQUEST_STATE_MAX_AGE) -> str | None:
    """The ask a ``signed_ask`` token names, if this server signed it for ``salt`` and this agent
    not more than ``max_age`` seconds ago; None for anything else (checked in constant time)."""
    if not isinstance(value, str) or len(value) > 400:
        return None
    try:
        data = signing.loads(value, salt=salt, max_age=max_age)
    except signing.BadSignature:  # SignatureExpired too
        return None
    if not isinstance(data, dict) or data.get("agent") != agent_id or not isinstance(data.get("ask"), str):
        return None
    return data["ask"]


def detailed_task(ask: Ask) -> dict[str, Any]:
    """``tasks/get``'s ``DetailedTask`` (2026-07-28): an ended task inlines the tool result it
    would have returned (without the 2025-11-25 ``related-task`` key)."""
    data = extension_task(ask)
    if data["status"] == "completed":
        result = task_result(ask)
        result["_meta"].pop(RELATED_TASK_META, None)
        data["result"] = result
    return data
