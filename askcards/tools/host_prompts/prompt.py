"""What every host prompt is made of: the prompt and the answer read back, the words of an
approval, the bounds of what a question holds, and the excerpts a person judges."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..ask_user_questions import INPUT_SCHEMA

ALLOW = "允许"
DENY = "拒绝"
ALLOW_SESSION = "本会话内允许"
HEADER = "权限请求"

# The ask_user_questions schema's bounds: what a question and an option description may hold.
QUESTION_ITEM = INPUT_SCHEMA["properties"]["questions"]["items"]["properties"]
QUESTION_MAX = QUESTION_ITEM["question"]["maxLength"]
DESCRIPTION_MAX = QUESTION_ITEM["options"]["items"]["properties"]["description"]["maxLength"]
EXCERPT_CHARS = 1200  # of a command, a diff or arguments: a screenful a person can judge


@dataclass(frozen=True)
class Progress:
    """What a host's tool and turn events say on a Feishu session's progress card."""

    status: str  # the card's: running | completed
    title: str
    content: str
    # A tool that just ran (host session id, tool name, its input as the audit holds it):
    # its permission was given — in the terminal, if askcards still asks about it.
    settled: tuple[str, str, str] | None = None
    # The host's own session (Claude Code's session_id) whose turn ended (``completed``): its
    # prompts are withdrawn, another host session's on the same askcards session are not.
    host_session: str = ""


def summary(tool_name: str, tool_input: dict[str, Any]) -> str:
    """One line saying what a tool does (a progress card's text)."""
    key = {"Bash": "command", "Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path",
           "Read": "file_path", "NotebookEdit": "notebook_path", "WebFetch": "url", "WebSearch": "query",
           "Grep": "pattern", "Glob": "pattern"}.get(tool_name)
    what = str(tool_input.get(key) or "") if key else ""
    what = " ".join(what.split())
    return f"{tool_name} · {excerpt(what, 120)}" if what else tool_name


class HostEventError(ValueError):
    """The host's event is not one askcards can ask about; ``str(error)`` says why (a 400)."""


@dataclass(frozen=True)
class Prompt:
    """What to ask, and what the host's decision needs back."""

    kind: str  # "permission" | "questions" | "elicitation"
    questions: list[dict[str, Any]]  # ask_user_questions' ``questions``
    audit: dict[str, Any]  # the host's context and the exact tool input shown (bounded), for the audit row
    tool_input: dict[str, Any] = field(default_factory=dict)
    host_questions: tuple[str, ...] = ()  # "questions": the host's own question texts, by position
    suggestions: list[Any] | None = None  # "permission": what 本会话内允许 answers with
    fields: tuple["Field", ...] = ()  # "elicitation": the requested schema's properties, by question
    checks: tuple[dict[str, Any] | None, ...] = ()  # "elicitation": each question's answer_checks rules


@dataclass(frozen=True)
class Answer:
    """The person's answer to a prompt's ask, as the ask's result holds it."""

    answers: list[dict[str, Any]]  # ask_user_questions' answers: {question, selectedLabels, customInput}
    by: str = ""  # the respondent
    surface: str = ""

    def choice(self) -> tuple[str, str]:
        """An approval's (label chosen, the text written), "" for either that is missing."""
        first = self.answers[0] if self.answers else {}
        labels = first.get("selectedLabels") or []
        return (str(labels[0]) if labels else ""), str(first.get("customInput") or "").strip()


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"…（其余 {len(text) - limit} 个字符未显示）"


def context_line(host: str, cwd: str, session_id: str) -> str:
    parts = [host]
    if cwd:
        parts.append(f"目录 {excerpt(cwd, 200)}")
    if session_id:
        parts.append(f"会话 {excerpt(session_id, 60)}")
    return " · ".join(parts)


@dataclass(frozen=True)
class Field:
    """One property of a requested schema, as its question asks it."""

    name: str
    kind: str  # choice | choices | boolean | string | number | integer
    labels: tuple[tuple[str, Any], ...] = ()  # choice(s): label -> value
    required: bool = False
    default: Any = None
    check: dict[str, Any] = field(default_factory=dict)  # its answer_checks rules

    @property
    def defaulted(self) -> bool:
        return self.default not in (None, "", [])
