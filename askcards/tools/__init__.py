"""Model-facing tools: their published schemas, validation, normalisation and result texts.

Pure data in, data out: nothing here touches the database, so every surface and the API share it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from . import ask_user_questions, dingtalk_ask_user_question

ERROR_TEXTS = {
    # reason -> what the model reads in tool_result["error"]
    "no_surface": "当前通道无法向用户提问",
    "not_available": "当前会话不提供该工具",
    "timeout": "用户未在规定时间内作答",
    "by_respondent": "用户取消了提问",
    "by_agent": "提问已取消",
    "by_operator": "提问已被管理员取消",
    "session_cancelled": "任务已取消，提问随之取消",
    "pause_failed": "当前任务未能暂停，此卡已失效，请重新发起。",
    "superseded_by_question": "问题已被新的提问取代",
    "superseded_by_message": "用户发送了新消息，问题已失效",
    "restart": "服务已重启，原问题上下文已失效，请重新发起。",
    "delivery_failed": "问题未能送达用户",
    "invalid_arguments": "参数无效",
}


class ToolInputError(ValueError):
    """The model's arguments do not match the published input schema."""


@dataclass(frozen=True)
class Normalised:
    """Validated tool input, ready to become an Ask."""

    questions: list[dict[str, Any]] | None = None
    fields: list[dict[str, Any]] | None = None
    title: str = ""
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    name: str
    description: str
    input_schema: dict[str, Any]
    blocking: bool

    def normalise(self, arguments: dict[str, Any]) -> Normalised: ...

    def answers_result(self, questions: list[dict[str, Any]], answers: list[dict[str, Any]]) -> dict[str, Any]: ...


REGISTRY: dict[str, Tool] = {
    ask_user_questions.TOOL.name: ask_user_questions.TOOL,
    dingtalk_ask_user_question.TOOL.name: dingtalk_ask_user_question.TOOL,
}

# Which tools a session of each platform may expose (SPEC §4). Sub-agent sessions get none.
PLATFORM_TOOLS: dict[str, tuple[str, ...]] = {
    "feishu": ("ask_user_questions",),
    "web": ("ask_user_questions",),
    "dingtalk": ("dingtalk_ask_user_question",),
    "wechat": (),
}


def tools_for(*, platform: str, is_subagent: bool) -> list[Tool]:
    if is_subagent:
        return []
    return [REGISTRY[name] for name in PLATFORM_TOOLS.get(platform, ()) if name in REGISTRY]


def get(name: str) -> Tool | None:
    return REGISTRY.get(name)


def validate(tool: Tool, arguments: Any) -> Normalised:
    """Check arguments against exactly the published schema, then the tool's own normalisation."""
    validator = jsonschema.Draft202012Validator(tool.input_schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        raise ToolInputError(describe_schema_error(errors[0]))
    return tool.normalise(arguments)


def describe_schema_error(error: jsonschema.ValidationError) -> str:
    path = "arguments"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f"{path}: {error.message}"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def error_result(reason: str, detail: str = "") -> str:
    """The tool_result a model reads when an ask ends without an answer (JSON with a reason code)."""
    text = ERROR_TEXTS.get(reason, reason)
    if detail:
        text = f"{text}：{detail}"
    return dumps({"error": text, "reason": reason})
