"""The base every model-facing tool builds on: what the lifecycle asks of a tool.

A tool is pure data in, data out (it reads no database and imports nothing of askcards above it).
The services own every write; they call these hooks and never name a tool:

- ``validate(arguments)`` — the call's arguments as the tool's typed request: an ``AskRequest``
  (the call asks people something: one Ask) or an ``ActionRequest`` (the call reads or ends
  earlier asks, handled by the service registered for its type). ``ToolInputError`` carries the
  exact text the model reads.
- ``refusal(error)`` — the tool_result of a call refused before any ask exists.
- ``failure_result(reason, …)`` — the result of an ask that failed (no surface, delivery failed).
- ``pending_result(…)`` — what activation shows: the result a non-blocking call returns while its
  ask is open (kept in the ask's result, so a retried call reads the same).
- ``close_result(closing)`` — the result an ask ends with, when the ending brings none of its own.
- ``check_answers(questions, answers)`` / ``answers_result`` — how a surface's answer is checked
  and what the agent reads of it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import jsonschema

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
    "host_gone": "智能体已停止等待",
    "host_handled": "已在终端处理",
    "caller_gone": "调用方已断开，提问已取消",
    "declined": "用户拒绝回答",
    "dismissed": "用户关闭了提问，未作答",
    "superseded_by_question": "问题已被新的提问取代",
    "superseded_by_message": "用户发送了新消息，问题已失效",
    "restart": "服务已重启，原问题上下文已失效，请重新发起。",
    "delivery_failed": "问题未能送达用户",
    "invalid_arguments": "参数无效",
}


# How long a person's answer may be, on every surface (docs/security.md, "Lengths"): each free-text value (an
# "其他" text, a DingTalk form field's text, one TEXT_ARRAY item) at most ANSWER_TEXT_MAX_CHARS
# characters, and the free text of one submission at most ANSWER_MAX_CHARS in all. Figures no one
# writing a long answer reaches (10,000 characters is about five pages of Chinese), delivered to
# the agent whole; a 50-person collection stays a few MB at worst. What a card or list shows of an
# answer is shortened there, never the answer.
ANSWER_TEXT_MAX_CHARS = 10_000
ANSWER_MAX_CHARS = 20_000


class ToolInputError(ValueError):
    """The model's arguments are invalid; ``str(error)`` is what the model reads."""


class AnswerRefused(ValueError):
    """An answer the form's own rules refuse (``tools.answer_checks``); ``str(error)`` is what the
    person reads (Chinese, naming the field, never the value), ``position`` the answer it is about."""

    position: int = -1


@dataclass(frozen=True)
class AskRequest:
    """A valid call that asks people something; the pipeline makes one Ask of it."""

    title: str
    description: str = ""
    questions: list[dict[str, Any]] | None = None  # the question DSL, when the call used it
    fields: list[dict[str, Any]] | None = None  # a form's fields, when the tool renders forms
    # A targeted collection: everyone listed must respond (case-insensitively unique). Empty: the
    # caller (sender_id, else the session's user) is the one respondent.
    respondent_ids: tuple[str, ...] = ()
    target_type: str = ""  # "" (not targeted) | user | group
    target_id: str = ""
    timeout: timedelta | None = None  # the call's own timeout, when the tool takes one


@dataclass(frozen=True)
class ActionRequest:
    """A valid call that reads or changes earlier asks instead of asking."""


@dataclass(frozen=True)
class Response:
    """One respondent's row as a tool reads it: ``answers`` as the surface stored them."""

    respondent_id: str
    status: str  # pending | submitted | empty | cancelled | missing
    answers: Any = None


@dataclass(frozen=True)
class Closing:
    """An ask ending: what ``close_result`` may read. ``responses`` are the respondents' rows at
    the moment it ends (only read for tools with ``result_reads_responses``)."""

    ask_id: str
    title: str
    status: str
    reason: str
    target_type: str = ""
    target_id: str = ""
    kept_tool_result: str | None = None  # the tool_result the call returned while the ask was open
    responses: list[Response] = field(default_factory=list)


class Tool:
    """A model-facing tool. Subclasses set the class attributes and implement ``parse``."""

    name: str = ""
    description: str = ""
    input_schema: dict[str, Any] = {}
    blocking: bool = True  # the call waits for the ask's outcome (else it returns at once)
    default_timeout = timedelta(minutes=15)
    # The call's own timeout (the API's and MCP's timeout_seconds) sets the ask's deadline.
    call_timeout: bool = True
    # The published schema is checked before ``parse`` (False: ``parse`` checks it itself, after
    # the tool's own checks, so the model reads the tool's texts first).
    schema_first: bool = True
    # A new untargeted ask replaces the same person's older ones in the conversation once it is
    # live, and its deadline counts from then.
    replaces_older: bool = False
    # ``close_result`` reads the respondents' rows (targeted collections, form answers).
    result_reads_responses: bool = False

    # --------------------------------------------------------------------------- validation

    def validate(self, arguments: Any) -> AskRequest | ActionRequest:
        if self.schema_first:
            check_schema(self.input_schema, arguments)
        return self.parse(arguments)

    def parse(self, arguments: Any) -> AskRequest | ActionRequest:
        raise NotImplementedError

    # ----------------------------------------------------------------------- results (texts)

    def refusal(self, error: str) -> str:
        """The tool_result of a call refused before any ask exists (invalid arguments)."""
        return error_result("invalid_arguments", error)

    def unavailable(self) -> str | None:
        """When the session does not offer this tool: the refusal text, or None to record the call
        as an ask failed with ``not_available`` (after validation)."""
        return None

    def failure_result(self, reason: str, *, ask_id: str, error: str = "") -> dict[str, Any] | None:
        """The result of an ask that failed (``no_surface``, ``delivery_failed``); None: the
        ending's default (``close_result``)."""
        return None

    def pending_result(
        self, request: AskRequest, *, ask_id: str, message_id: str, deadline: datetime
    ) -> dict[str, Any] | None:
        """What a non-blocking call returns while its ask is open; None for blocking tools."""
        return None

    def activation_lost_result(self, *, ask_id: str, message_id: str) -> str | None:
        """The tool_result when the ask ended while it was being delivered; None: its ending's."""
        return None

    def close_result(self, closing: Closing) -> dict[str, Any]:
        """The result of an ask that ends without an answer of its own."""
        return {"tool_result": error_result(closing.reason)} if self.blocking else {}

    # ---------------------------------------------------------------------------- answers

    def check_answers(self, questions: list[dict[str, Any]], answers: Any) -> Any:
        """A surface's answer, normalised; ValueError saying what is wrong."""
        raise ValueError("this tool's asks are not answered on this surface")

    def answers_result(self, questions: list[dict[str, Any]], answers: Any) -> dict[str, Any]:
        """The ask's result once ``answers`` (from ``check_answers``) won."""
        return {"answers": answers, "tool_result": dumps({"answers": answers})}


def check_schema(schema: dict[str, Any], arguments: Any) -> None:
    """ToolInputError naming the first place where ``arguments`` leave the published schema."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        raise ToolInputError(describe_schema_error(errors[0]))


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
