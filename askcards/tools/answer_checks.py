"""The rules an MCP server's elicitation sets on each value (``requestedSchema``: a number's
``minimum`` / ``maximum``, an integer, a text's ``minLength`` / ``maxLength`` and ``format`` —
email, uri, date, date-time —, a multi-select's ``minItems`` / ``maxItems``, a required field),
checked when the person submits, on every surface, so an invalid value is refused there with words
saying why — never sent to the host as ``accept``.

A check is plain JSON stored with the ask (``Check``, on each question of an ``ask_user_questions``
form, on each choice field of a DingTalk form): the agent host's prompt sets it
(``services.hosts``), never a model (the tools' published schemas have no place for it). The form's
last question, 回应, carries the ``response`` check: when the person declines (拒绝提供) nothing else
is checked. What the person reads (``AnswerRefused``) names the field by its title, never the value.

Pure data in, data out: no models, no services.
"""
from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Any

from .base import AnswerRefused

KEY = "check"  # the question's (or DingTalk field's) key holding its check
RESPONSE = "response"  # the role of the 回应 question's check
TEXT_KINDS = ("string", "number", "integer")
FORMATS = ("email", "uri", "date", "date-time")

REQUIRED = "「{title}」为必填项，请填写后再提交。"
CHOOSE = "「{title}」请从选项中选择。"
INTEGER = "「{title}」应为整数。"
NUMBER = "「{title}」应为数字。"
MINIMUM = "「{title}」应不小于 {bound}。"
MAXIMUM = "「{title}」应不大于 {bound}。"
MIN_LENGTH = "「{title}」至少 {count} 个字。"
MAX_LENGTH = "「{title}」至多 {count} 个字。"
MIN_ITEMS = "「{title}」至少选择 {count} 项。"
MAX_ITEMS = "「{title}」至多选择 {count} 项。"
FORMAT = {
    "email": "「{title}」应为邮箱地址（如 name@example.com）。",
    "uri": "「{title}」应为完整网址（如 https://example.com/page）。",
    "date": "「{title}」应为日期（年-月-日，如 2026-08-01）。",
    "date-time": "「{title}」应为日期时间（如 2026-08-01T09:30:00+08:00，须带时区）。",
}
# How each format is written, for the question's own text.
FORMAT_HINT = {
    "email": "邮箱地址",
    "uri": "完整网址，如 https://example.com/page",
    "date": "日期，年-月-日，如 2026-08-01",
    "date-time": "日期时间，如 2026-08-01T09:30:00+08:00（须带时区）",
}

_INTEGER = re.compile(r"[+-]?\d{1,30}")
_NUMBER = re.compile(r"[+-]?(\d{1,30}(\.\d{0,30})?|\.\d{1,30})([eE][+-]?\d{1,4})?")
_EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s.]+(\.[^@\s.]+)+")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+|(mailto|urn|tel|data):\S+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?)([Zz]|[+-]\d{2}:\d{2})")


def bound(value: Any) -> float | int | None:
    """A schema's numeric bound, if it is one (a number, finite, not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def count(value: Any) -> int | None:
    """A schema's count bound (lengths, items), if it is one (a whole number ≥ 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def value_of(check: dict[str, Any], text: str) -> Any:
    """The typed value of a written answer (an int, a float, the text — a date-time written with a
    space is sent with the ``T``); AnswerRefused saying what is wrong with it."""
    title, kind = check.get("title", ""), check.get("kind")
    if kind not in ("integer", "number"):
        value = _formatted(check, text)
        if (low := count(check.get("minLength"))) is not None and len(value) < low:
            raise AnswerRefused(MIN_LENGTH.format(title=title, count=low))
        if (high := count(check.get("maxLength"))) is not None and len(value) > high:
            raise AnswerRefused(MAX_LENGTH.format(title=title, count=high))
        return value
    number: int | float
    if _INTEGER.fullmatch(text):
        number = int(text)
    elif kind == "number" and _NUMBER.fullmatch(text) and math.isfinite(float(text)):
        number = float(text)
    else:
        raise AnswerRefused((INTEGER if kind == "integer" else NUMBER).format(title=title))
    if (least := bound(check.get("minimum"))) is not None and number < least:
        raise AnswerRefused(MINIMUM.format(title=title, bound=_shown(least)))
    if (most := bound(check.get("maximum"))) is not None and number > most:
        raise AnswerRefused(MAXIMUM.format(title=title, bound=_shown(most)))
    return number


def _formatted(check: dict[str, Any], text: str) -> str:
    """The text in its ``format`` (a date-time with ``T``); AnswerRefused when it is not one."""
    form = check.get("format")
    if form not in FORMAT:
        return text  # no format, or one askcards does not know: shown, not checked
    if form == "date-time":
        found = _DATE_TIME.fullmatch(text)
        if found is not None and _real_date(found.group(1)) and _real_time(found.group(2)):
            zone = found.group(5)
            return f"{found.group(1)}T{found.group(2)}{'Z' if zone in 'Zz' else zone}"
    elif {"email": _EMAIL, "uri": _URI, "date": _DATE}[form].fullmatch(text) and (form != "date" or _real_date(text)):
        return text
    raise AnswerRefused(FORMAT[form].format(title=check.get("title", "")))


def _real_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _real_time(text: str) -> bool:
    """``HH:MM`` or ``HH:MM:SS`` (a fraction after it), each part in range."""
    try:
        datetime.strptime(text[:8], "%H:%M:%S" if len(text) >= 8 else "%H:%M")
    except ValueError:
        return False
    return True


def _shown(value: float | int) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def problem(check: dict[str, Any], labels: list[str], text: str) -> None:
    """AnswerRefused when a field's answer (the option labels chosen, the words written) breaks its
    check; nothing when it holds."""
    title, kind = check.get("title", ""), check.get("kind")
    required, defaulted = bool(check.get("required")), bool(check.get("default"))
    if kind in TEXT_KINDS:
        if text:
            value_of(check, text)
        elif check.get("empty") in labels:
            if required and not defaulted:
                raise AnswerRefused(REQUIRED.format(title=title))
        elif required and not defaulted:  # 填写 chosen, nothing written
            raise AnswerRefused(REQUIRED.format(title=title))
        return
    if text:  # words written where only the options are values: they could not be sent
        raise AnswerRefused(CHOOSE.format(title=title))
    chosen = [label for label in labels if label in (check.get("labels") or [])]
    if not chosen and required and not defaulted:
        raise AnswerRefused(REQUIRED.format(title=title))
    if kind == "choices" and chosen:
        if (low := count(check.get("minItems"))) is not None and len(chosen) < low:
            raise AnswerRefused(MIN_ITEMS.format(title=title, count=low))
        if (high := count(check.get("maxItems"))) is not None and len(chosen) > high:
            raise AnswerRefused(MAX_ITEMS.format(title=title, count=high))


def enforce(checks: list[dict[str, Any] | None], answers: list[tuple[list[str], str]]) -> None:
    """Every check against its answer (labels chosen, words written), in order; the first that
    fails raises AnswerRefused (its ``position`` the answer's index). Declining (the ``response``
    check's ``decline`` label) checks nothing: declining needs no valid values."""
    for check, (labels, _) in zip(checks, answers):
        if check and check.get("role") == RESPONSE and check.get("decline") in labels:
            return
    for position, (check, (labels, text)) in enumerate(zip(checks, answers)):
        if check and check.get("role") != RESPONSE:
            try:
                problem(check, labels, text.strip())
            except AnswerRefused as refused:
                refused.position = position
                raise
