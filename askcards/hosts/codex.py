"""Codex's ``PermissionRequest`` command hooks, forwarded by a one-line ``curl`` (docs/agents/hosts.md).

Codex (0.171.0, the version the tests pin) writes the event as JSON on the hook's stdin — the
shape of Claude Code's (``hook_event_name``, ``session_id``, ``turn_id``, ``cwd``, ``tool_name``,
``tool_input``) — and reads the decision on its stdout, strictly: exactly

    {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}
    {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "…"}}}

(an extra key anywhere is "invalid output" and Codex falls back to its own prompt). No decision is
an empty stdout: askcards answers 204 with no body, which ``curl`` prints as nothing, and Codex shows
its own prompt. Only ``codex`` in its terminal runs these hooks: ``codex exec`` never asks them.
"""
from __future__ import annotations

from typing import Any

from askcards.tools import host_prompts as prompts
from askcards.tools.host_prompts import Answer, HostEventError, Progress, Prompt

from . import claude_code

HOST = "Codex"


def read_event(event: Any) -> Prompt | Progress | None:
    """An approval for a ``PermissionRequest``; None (no decision) for any other event."""
    if not isinstance(event, dict):
        raise HostEventError("the body must be a Codex hook event: a JSON object with hook_event_name")
    name = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise HostEventError("the body has no hook_event_name: is this hook's URL meant for another host?")
    if name != claude_code.PERMISSION_REQUEST:
        return None
    title = f"{HOST} · {claude_code._folder(event.get('cwd'))}"
    tool_name, tool_input, cwd, session_id, audit = claude_code.permission_request(event, host="codex", title=title)
    return prompts.approval(host=HOST, tool_name=tool_name, tool_input=tool_input, cwd=cwd,
                            session_id=session_id, suggestions=None, audit=audit)


def decision(prompt: Prompt, answer: Answer) -> dict[str, Any]:
    choice, text = answer.choice()
    decided: dict[str, Any] = (
        {"behavior": "allow"} if choice == prompts.ALLOW
        else {"behavior": "deny", "message": claude_code.deny_message(text, answer)}
    )
    return {"hookSpecificOutput": {"hookEventName": claude_code.PERMISSION_REQUEST, "decision": decided}}
