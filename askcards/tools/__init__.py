"""Model-facing tools: their published schemas, validation to typed requests, answer checks and
result texts, on the ``Tool`` base (``tools/base.py``).

Pure data in, data out: nothing here touches the database, so every surface and the API share it.
"""
from __future__ import annotations

from . import answer_checks, ask_user_questions, dingtalk_ask_user_question
from .base import (
    ANSWER_MAX_CHARS,
    ANSWER_TEXT_MAX_CHARS,
    ERROR_TEXTS,
    ActionRequest,
    AnswerRefused,
    AskRequest,
    Closing,
    Response,
    Tool,
    ToolInputError,
    dumps,
    error_result,
)

__all__ = [
    "ANSWER_MAX_CHARS", "ANSWER_TEXT_MAX_CHARS", "ERROR_TEXTS", "PLATFORM_TOOLS", "REGISTRY", "ActionRequest", "AnswerRefused",
    "AskRequest", "Closing", "Response", "Tool",
    "ToolInputError", "answer_checks", "ask_user_questions", "dingtalk_ask_user_question", "dumps", "error_result", "get", "tools_for",
]

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
