"""Claude Code's ``http`` hooks: the event it posts, and the decision it obeys.

``PermissionRequest`` (the prompt before a tool runs) becomes an approval; for ``AskUserQuestion``
— Claude Code's own questions, whose input has ``ask_user_questions``' shape — the questions
themselves, answered as ``allow`` with ``updatedInput.answers`` (question text → label, a
multi-select's labels and the 其他 text joined by ", "), so the model reads the person's answer as
if it had been typed in the terminal. Every other event gets no decision (``{}``): Claude Code
carries on as it would without the hook.

The decision shape, as the binary obeys it::

    {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                            "decision": {"behavior": "allow", "updatedInput": {...}, "updatedPermissions": [...]}}}
    {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                            "decision": {"behavior": "deny", "message": "..."}}}
"""
from __future__ import annotations

import json
from typing import Any

from askcards.tools import host_prompts as prompts
from askcards.tools.host_prompts import Answer, HostEventError, Progress, Prompt

HOST = "Claude Code"
PERMISSION_REQUEST = "PermissionRequest"
ASK_USER_QUESTION = "AskUserQuestion"
AUDIT_INPUT_CHARS = 4000
ELICITATION = "Elicitation"
TOOL_EVENTS = {"PreToolUse": "执行中", "PostToolUse": "已完成", "PostToolUseFailure": "失败"}
STOP = "Stop"


def read_event(event: Any) -> Prompt | Progress | None:
    """The prompt to ask about; the progress a tool or turn event reports (no decision either);
    or None when the event needs no decision (answered ``{}``). HostEventError when it is not a
    Claude Code hook event at all."""
    if not isinstance(event, dict):
        raise HostEventError("the body must be a Claude Code hook event: a JSON object with hook_event_name")
    name = event.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise HostEventError("the body has no hook_event_name: is this hook's URL meant for another host?")
    title = f"{HOST} · {_folder(event.get('cwd'))}"
    if name in TOOL_EVENTS and isinstance(event.get("tool_name"), str):
        used = event.get("tool_input")
        what = prompts.summary(event["tool_name"], used if isinstance(used, dict) else {})
        # PreToolUse comes before the permission check; a tool that ran had its permission.
        settled = None if name == "PreToolUse" else (
            _text(event.get("session_id"))[:200], event["tool_name"][:200],
            prompts.excerpt(_json(used), AUDIT_INPUT_CHARS))
        return Progress("running", title, f"{TOOL_EVENTS[name]}：{what}", settled)
    if name == STOP:
        return Progress("completed", title, "本轮已完成", host_session=_text(event.get("session_id"))[:200])
    if name == ELICITATION:
        return _elicitation(event, title)
    if name != PERMISSION_REQUEST:
        return None  # Notification, ElicitationResult, SessionStart, …, and events a later Claude Code adds
    tool_name, tool_input, cwd, session_id, audit = permission_request(event, host="claude-code", title=title)
    if tool_name == ASK_USER_QUESTION:
        return prompts.host_questions(host=HOST, questions=tool_input.get("questions"), cwd=cwd,
                                      session_id=session_id, tool_input=tool_input, audit=audit)
    suggestions = event.get("permission_suggestions")
    return prompts.approval(host=HOST, tool_name=tool_name, tool_input=tool_input, cwd=cwd, session_id=session_id,
                            suggestions=suggestions if isinstance(suggestions, list) else None, audit=audit)


def permission_request(event: dict[str, Any], *, host: str, title: str) -> tuple[str, dict[str, Any], str, str, dict[str, Any]]:
    """A ``PermissionRequest`` event's tool name and input, working directory and session id, and
    the audit detail of the prompt (Claude Code's and Codex's events share the shape);
    HostEventError when the tool name or input is missing."""
    tool_name, tool_input = event.get("tool_name"), event.get("tool_input")
    if not isinstance(tool_name, str) or not tool_name:
        raise HostEventError("a PermissionRequest event needs tool_name (a string)")
    if not isinstance(tool_input, dict):
        raise HostEventError("a PermissionRequest event needs tool_input (an object)")
    cwd, session_id = _text(event.get("cwd")), _text(event.get("session_id"))
    audit = {
        "host": host, "event": PERMISSION_REQUEST, "session_id": session_id[:200], "cwd": cwd[:500],
        "tool_name": tool_name[:200], "tool_input": prompts.excerpt(_json(tool_input), AUDIT_INPUT_CHARS),
        "host_title": title,
    }
    return tool_name, tool_input, cwd, session_id, audit


def _elicitation(event: dict[str, Any], title: str) -> Prompt | None:
    """An MCP server's form request; a URL-mode one (open a page) is not asked here: no decision."""
    if event.get("mode", "form") != "form":
        return None
    cwd, session_id = _text(event.get("cwd")), _text(event.get("session_id"))
    server, message = _text(event.get("mcp_server_name")), _text(event.get("message"))
    schema = event.get("requested_schema")
    audit = {"host": "claude-code", "event": ELICITATION, "session_id": session_id[:200], "cwd": cwd[:500],
             "mcp_server": server[:200], "message": prompts.excerpt(message, 1000),
             "requested_schema": prompts.excerpt(_json(schema), AUDIT_INPUT_CHARS), "host_title": title}
    return prompts.elicitation(host=HOST, server=server, message=message, schema=schema, cwd=cwd,
                               session_id=session_id, audit=audit)


def decision(prompt: Prompt, answer: Answer) -> dict[str, Any]:
    """The host's decision for the person's answer."""
    if prompt.kind == "elicitation":
        action, content = prompts.elicitation_content(prompt, answer)
        if not action:
            return {}  # not a valid content: Claude Code asks in its own dialog
        output: dict[str, Any] = {"hookEventName": ELICITATION, "action": action}
        if content is not None:
            output["content"] = content
        return {"hookSpecificOutput": output}
    if prompt.kind == "questions":
        updated = {**prompt.tool_input, "answers": prompts.answers_by_question(prompt, answer)}
        return _output({"behavior": "allow", "updatedInput": updated})
    choice, text = answer.choice()
    if choice == prompts.ALLOW:
        return _output({"behavior": "allow", "updatedInput": prompt.tool_input})
    if choice == prompts.ALLOW_SESSION and prompt.suggestions:
        # For this session only, as the option says (a suggestion naming localSettings would persist).
        rules = [{**rule, "destination": "session"} if isinstance(rule, dict) else rule for rule in prompt.suggestions]
        return _output({"behavior": "allow", "updatedInput": prompt.tool_input, "updatedPermissions": rules})
    # 拒绝, or only words written: a refusal whose reason the model reads.
    return _output({"behavior": "deny", "message": deny_message(text, answer)})


# Endings where the person (or an operator for them) dismissed the form: an elicitation is answered
# ``cancel`` (the MCP server reads "dismissed without a choice"; Claude Code shows no dialog of its
# own). Every other ending — the host stopped waiting, the deadline — is no decision.
DISMISSED = ("by_respondent", "by_operator", "session_cancelled")


def ended(prompt: Prompt, reason: str) -> dict[str, Any]:
    """The host's reply when the prompt's ask ended without an answer (``reason``)."""
    if prompt.kind == "elicitation" and reason in DISMISSED:
        return {"hookSpecificOutput": {"hookEventName": ELICITATION, "action": "cancel"}}
    return {}


def deny_message(text: str, answer: Answer) -> str:
    where = f" on {answer.surface}" if answer.surface else ""
    said = f"The user denied this{where} (askcards)"
    return f"{said}: {text}" if text else f"{said}."


def _output(decision: dict[str, Any]) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": PERMISSION_REQUEST, "decision": decision}}


def _folder(cwd: Any) -> str:
    """The working directory's last part, as a card title names the project."""
    text = cwd.rstrip("/") if isinstance(cwd, str) else ""
    return prompts.excerpt(text.rsplit("/", 1)[-1] or text or "?", 60)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
