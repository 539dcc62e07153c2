"""Headless permission prompts: ``claude -p … --permission-prompt-tool mcp__askcards__permission_prompt``.

In a headless run Claude Code has no terminal to ask in; it calls this MCP tool instead, with the
tool it wants to use and that tool's input, and obeys the JSON text the tool returns:
``{"behavior": "allow", "updatedInput": {…}}`` or ``{"behavior": "deny", "message": "…"}``. The
tool is listed only when the MCP URL asks for it (``/mcp?session=…&permission_prompt=1``): a
model never sees it otherwise. Anything but a person's 允许 is a denial — no one to ask, no answer
in time, a call the form cannot show — so a headless run never goes ahead unasked.
"""
from __future__ import annotations

from typing import Any

from askcards.tools import host_prompts as prompts
from askcards.tools.host_prompts import Answer, HostEventError, Prompt

from . import claude_code

NAME = "permission_prompt"
DESCRIPTION = (
    "Ask a person (on Feishu, DingTalk or the askcards web panel) whether Claude Code may use a tool; "
    "for claude --permission-prompt-tool. Returns {\"behavior\": \"allow\", \"updatedInput\": …} or "
    "{\"behavior\": \"deny\", \"message\": …} as JSON text."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "description": "the tool Claude Code wants to use"},
        "input": {"type": "object", "description": "that tool's input"},
        "tool_use_id": {"type": "string"},
    },
    "required": ["tool_name", "input"],
}
NOBODY = "No one could be asked on askcards (no card, no open panel), so this was not allowed."
UNANSWERED = "Not allowed: no one answered on askcards in time, or the ask was withdrawn."


def read_call(arguments: Any) -> Prompt:
    """The approval to ask for; HostEventError for arguments that are not a permission prompt's."""
    if not isinstance(arguments, dict):
        raise HostEventError("arguments must be an object with tool_name and input")
    tool_name, tool_input = arguments.get("tool_name"), arguments.get("input")
    if not isinstance(tool_name, str) or not tool_name:
        raise HostEventError("arguments.tool_name must be the name of the tool to allow (a string)")
    if not isinstance(tool_input, dict):
        raise HostEventError("arguments.input must be that tool's input (an object)")
    raw_id = arguments.get("tool_use_id")
    tool_use_id = raw_id if isinstance(raw_id, str) else ""
    audit = {"host": "claude-code", "event": "permission_prompt_tool", "tool_use_id": tool_use_id[:200],
             "tool_name": tool_name[:200],
             "tool_input": prompts.excerpt(claude_code._json(tool_input), claude_code.AUDIT_INPUT_CHARS)}
    host = f"{claude_code.HOST}（无终端）"
    if tool_name == claude_code.ASK_USER_QUESTION:  # offered in -p runs with a prompt tool: its questions are asked
        return prompts.host_questions(host=host, questions=tool_input.get("questions"), cwd="", session_id="",
                                      tool_input=tool_input, audit=audit)
    return prompts.approval(host=host, tool_name=tool_name, tool_input=tool_input,
                            cwd="", session_id="", suggestions=None, audit=audit)


def decision(prompt: Prompt, answer: Answer) -> dict[str, Any]:
    """The tool's reply for the person's answer (Claude Code's hook decision, unwrapped)."""
    decided: dict[str, Any] = claude_code.decision(prompt, answer)["hookSpecificOutput"]["decision"]
    return decided


def refusal(message: str) -> dict[str, Any]:
    return {"behavior": "deny", "message": message}
