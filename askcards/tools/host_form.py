"""An ask as the host's own form: an MCP ``elicitation/create`` (form mode) that the host shows its
user, and the content it sends back read as the ask's answers. ``elicitation`` builds the form
(None when the ask cannot be put that way) and ``read`` turns the content back into what the ask's
tool takes; both for ``ask_user_questions`` and ``dingtalk_ask_user_question`` (its ``fields``).

What the elicitation schema can express, and what it cannot (said in docs/agents/mcp.md too):

``ask_user_questions``: each question is one field ``q<n>``: a single select a string with
``oneOf`` ``{const, title}`` (the option's label), a multi select an array of them; the question
text is the field's ``description``, its header the ``title``. The schema requires a choice, as it
cannot say "a choice or your own words"; content with only the words is still taken, as the panel
takes it. The 其他（可选） box is a second, optional string field ``q<n>_other`` (at most
``ANSWER_TEXT_MAX_CHARS``). An option's description and preview, and markdown in the question,
have no place in the schema: the host shows the labels only.

DingTalk ``fields``: each visible field is a property named as the field, titled with its label,
``required`` as the field says, its default as ``default``: ``TEXT`` / ``TEXT_AREA`` a string (at
most ``ANSWER_TEXT_MAX_CHARS``), ``NUMBER`` a number, ``DATE`` a string with ``format: date``,
``CHECKBOX`` / ``SWITCH`` a boolean, ``SELECT`` / ``CHECKBOX_GROUP`` a string with ``oneOf``
``{const: value, title: text}``, ``MULTI_SELECT`` / ``MULTI_CHECKBOX_GROUP`` an array of them.
Hidden and read-only fields are not shown (the card's form records their defaults, as on the
card). ``TIME``, ``DATETIME`` (the schema has no time of day, and its ``date-time`` carries an
offset the card's wall time has not) and ``TEXT_ARRAY`` (an array of free texts) have no
equivalent: a form with any of them is not put to the host.

On 2025-06-18 the schema has no titled enums and no arrays: a single select is a string with
``enum`` (DingTalk: the values, with their texts as ``enumNames``), and an ask with a multi select
is not put to the host. The elicitation's ``mode`` exists from 2025-11-25 on.

Plain data in, data out: no models, no services.
"""
from __future__ import annotations

from typing import Any

from .base import ANSWER_TEXT_MAX_CHARS
from .dingtalk_ask_user_question import NAME as DINGTALK_TOOL
from .dingtalk_ask_user_question import default_of

OTHER = "其他（可选）"
QUESTIONS_MESSAGE = "请回答以下问题（也可在飞书、钉钉或网页面板作答，以最先提交的回答为准）"
FORM_MESSAGE = "请填写以下表单（也可在钉钉卡片或网页面板作答，以最先提交的回答为准）"

_SINGLE = frozenset({"SELECT", "CHECKBOX_GROUP"})
_MULTIPLE = frozenset({"MULTI_SELECT", "MULTI_CHECKBOX_GROUP"})
_CHOICE_OBJECT = frozenset({"SELECT", "MULTI_SELECT"})  # the card sends {index, value}
_TEXT = frozenset({"TEXT", "TEXT_AREA"})
_BOOLEAN = frozenset({"CHECKBOX", "SWITCH"})
INEXPRESSIBLE = frozenset({"TIME", "DATETIME", "TEXT_ARRAY"})


class FormContentError(ValueError):
    """The host's content does not answer the form (a value that is none of the options)."""


class _Inexpressible(Exception):
    """A part of the ask the elicitation schema cannot hold."""


def elicitation(*, tool: str, questions: list[dict[str, Any]] | None, fields: list[dict[str, Any]] | None,
                title: str = "", description: str = "", legacy: bool = False) -> dict[str, Any] | None:
    """The ``elicitation/create`` params (form mode) asking this ask, or None when the schema
    cannot express it (see the module's docstring). ``legacy``: the 2025-06-18 schema."""
    try:
        if tool == DINGTALK_TOOL:
            message = "\n".join(part for part in (title, description) if part) or FORM_MESSAGE
            schema = _fields_schema(fields or [], legacy=legacy)
        else:
            message = title or QUESTIONS_MESSAGE
            schema = _questions_schema(questions or [], legacy=legacy)
    except _Inexpressible:
        return None
    params: dict[str, Any] = {"message": message, "requestedSchema": schema}
    return params if legacy else {"mode": "form", **params}


def read(*, tool: str, questions: list[dict[str, Any]] | None, fields: list[dict[str, Any]] | None,
         content: Any) -> Any:
    """The host's ``accept`` content as the ask's tool takes an answer: ``ask_user_questions``
    answers ``[{question, selectedLabels, customInput}]``, or a DingTalk form (field name →
    value, in the card's value shapes); FormContentError for content that is not this form's."""
    if not isinstance(content, dict):
        raise FormContentError("the form's content must be an object")
    if tool == DINGTALK_TOOL:
        return _dingtalk_form(fields or [], content)
    return _answers(questions or [], content)


# ------------------------------------------------------------------------- ask_user_questions


def _field(index: int) -> str:
    return f"q{index + 1}"


def _questions_schema(questions: list[dict[str, Any]], *, legacy: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for index, question in enumerate(questions):
        labels = [option["label"] for option in question.get("options", [])]
        header = question.get("header") or question["question"]
        field: dict[str, Any] = {"title": header, "description": question["question"]}
        if question.get("multiSelect"):
            if legacy:
                raise _Inexpressible("multiSelect")
            field.update(type="array", items={"anyOf": [{"const": label, "title": label} for label in labels]},
                         minItems=1)
        elif legacy:
            field.update(type="string", enum=labels)
        else:
            field.update(type="string", oneOf=[{"const": label, "title": label} for label in labels])
        properties[_field(index)] = field
        properties[f"{_field(index)}_other"] = {"type": "string", "title": f"{header}：{OTHER}",
                                                "maxLength": ANSWER_TEXT_MAX_CHARS}
    return {"type": "object", "properties": properties, "required": [_field(index) for index in range(len(questions))]}


def _answers(questions: list[dict[str, Any]], content: dict[str, Any]) -> list[dict[str, Any]]:
    result = []
    for index, question in enumerate(questions):
        labels = {option["label"] for option in question.get("options", [])}
        chosen = content.get(_field(index))
        picked = chosen if isinstance(chosen, list) else [] if chosen is None else [chosen]
        if not all(isinstance(label, str) and label in labels for label in picked):
            raise FormContentError(f"{_field(index)}: {chosen!r} is none of the options")
        if not question.get("multiSelect") and len(picked) > 1:
            raise FormContentError(f"{_field(index)}: a single select takes one option")
        other = content.get(f"{_field(index)}_other")
        if other is not None and not isinstance(other, str):
            raise FormContentError(f"{_field(index)}_other must be text")
        result.append({"question": question["question"], "selectedLabels": list(picked),
                       "customInput": other.strip() if other and other.strip() else None})
    return result


# ------------------------------------------------------------------------------ DingTalk fields


def _shown(field: dict[str, Any]) -> bool:
    return not (field.get("hidden") or field.get("readOnly"))


def _default(field: dict[str, Any]) -> Any:
    """The field's default as the schema's ``default`` holds it (None: none, or not of its shape)."""
    default = default_of(field)
    if field["type"] in _CHOICE_OBJECT and isinstance(default, dict):
        default = default.get("value")
    kind = field["type"]
    values = {option["value"] for option in field.get("options") or []}
    if kind in _TEXT or kind == "DATE":
        return default if isinstance(default, str) else None
    if kind == "NUMBER":
        return default if isinstance(default, (int, float)) and not isinstance(default, bool) else None
    if kind in _BOOLEAN:
        return default if isinstance(default, bool) else None
    if kind in _SINGLE:
        return default if isinstance(default, str) and default in values else None
    if isinstance(default, list) and default and all(isinstance(v, str) and v in values for v in default):
        return default
    return None


def _fields_schema(fields: list[dict[str, Any]], *, legacy: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required = []
    for field in fields:
        if not _shown(field):
            continue
        kind = field["type"]
        options = field.get("options") or []
        prop: dict[str, Any] = {"title": field.get("label") or field["name"]}
        if kind in INEXPRESSIBLE:
            raise _Inexpressible(kind)
        if kind in _TEXT:
            prop.update(type="string", maxLength=ANSWER_TEXT_MAX_CHARS)
        elif kind == "DATE":
            prop.update(type="string", format="date")
        elif kind == "NUMBER":
            prop["type"] = "number"
        elif kind in _BOOLEAN:
            prop["type"] = "boolean"
        elif kind in _SINGLE and legacy:
            prop.update(type="string", enum=[o["value"] for o in options], enumNames=[o["text"] for o in options])
        elif kind in _SINGLE:
            prop.update(type="string", oneOf=[{"const": o["value"], "title": o["text"]} for o in options])
        elif kind in _MULTIPLE and not legacy:
            prop.update(type="array", items={"anyOf": [{"const": o["value"], "title": o["text"]} for o in options]})
        else:
            raise _Inexpressible(kind)
        default = _default(field)
        if default is not None:
            prop["default"] = default
        properties[field["name"]] = prop
        if field.get("required"):
            required.append(field["name"])
    return {"type": "object", "properties": properties, "required": required}


def _dingtalk_form(fields: list[dict[str, Any]], content: dict[str, Any]) -> dict[str, Any]:
    """The content in the card's value shapes (``SELECT`` ``{index, value}``, ``MULTI_SELECT``
    ``{index: [..], value: [..]}``, the others as they are); the tool's ``check_form`` then
    checks it as it checks a card's submit."""
    form: dict[str, Any] = {}
    for field in fields:
        name = field["name"]
        if not _shown(field) or content.get(name) is None:
            continue
        raw = content[name]
        kind = field["type"]
        if kind in _CHOICE_OBJECT:
            values = [option["value"] for option in field.get("options") or []]
            chosen = raw if isinstance(raw, list) else [raw]
            if kind == "SELECT" and isinstance(raw, list):
                raise FormContentError(f"{name}: a single select takes one option")
            if not all(isinstance(value, str) and value in values for value in chosen):
                raise FormContentError(f"{name}: {raw!r} is none of the options")
            indexes = [values.index(value) for value in chosen]
            if kind == "MULTI_SELECT":
                raw = {"index": indexes, "value": chosen}
            else:
                raw = {"index": indexes[0], "value": chosen[0]}
        form[name] = raw
    return form
