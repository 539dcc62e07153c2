"""An MCP server's request for input (an elicitation) asked as ask_user_questions, and the
content read back off the answer."""
from __future__ import annotations

from typing import Any

from .. import answer_checks
from ..base import AnswerRefused
from .prompt import Answer, Field, HostEventError, Prompt, QUESTION_ITEM, QUESTION_MAX, context_line, excerpt

# ------------------------------------------------------------------------------ elicitations
# An MCP server's request for input (``requestedSchema``: an object of flat properties) asked as
# ask_user_questions: one question per property, and a last one, 回应, to submit or decline. A
# choice (``enum``, ``oneOf`` of ``const``/``title``, an array of those: several) is options; a
# boolean is 是 / 否; text and numbers are written in 其他 (the options say so, and 留空 leaves an
# optional one out). Each question carries its property's rules (``answer_checks``: required, a
# number's bounds, an integer, a text's length and format, how many of a multi-select), checked
# when the person submits on any surface. The form's size is the surface's: Feishu and the panel
# hold ask_user_questions' four questions (three properties and 回应) of two to four options each,
# a DingTalk form card up to ten questions and any number of options; a schema larger than the
# session's surface holds is not asked here (no decision: the host asks in its own dialog).

SUBMIT = "提交"
DECLINE = "拒绝提供"
YES, NO = "是", "否"
WRITE = "填写（写在「其他」里）"
EMPTY = "留空"
MAX_FIELDS = 20  # beyond any surface's form: not asked (the DingTalk form's 20 fields hold 9)
MAX_CHOICES = 50
HEADER_MAX = QUESTION_ITEM["header"]["maxLength"]
TEXT_TYPES = answer_checks.TEXT_KINDS


def _choices(schema: dict[str, Any]) -> list[tuple[str, Any]] | None:
    values, given = schema.get("enum"), schema.get("enumNames")
    if isinstance(values, list):
        names: list[Any] = given if isinstance(given, list) else []
        return [(str(names[i]) if i < len(names) else str(value), value) for i, value in enumerate(values)]
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list) and all(isinstance(o, dict) and "const" in o for o in schema[key]):
            return [(str(o.get("title") or o["const"]), o["const"]) for o in schema[key]]
    return None


def _field(name: str, schema: Any, required: bool) -> Field:
    if not isinstance(schema, dict):
        raise HostEventError(f"requested_schema.properties.{name} must be an object")
    kind = schema.get("type")
    found: list[tuple[str, Any]] | None
    if kind == "array":
        items = schema.get("items")
        found = _choices(items) if isinstance(items, dict) else None
        if found is None:
            raise HostEventError(f"requested_schema.properties.{name}: an array must list its choices (items.enum)")
        kind = "choices"
    elif (found := _choices(schema)) is not None:
        kind = "choice"
    elif kind == "boolean":
        found = [(YES, True), (NO, False)]
    elif kind not in TEXT_TYPES:
        raise HostEventError(f"requested_schema.properties.{name}: type {kind!r} cannot be asked as a form here")
    title = str(schema.get("title") or "").strip() or name
    default = schema.get("default")
    check: dict[str, Any] = {"title": excerpt(title, 60), "kind": kind, "required": required,
                             "default": default not in (None, "", [])}
    if found:
        check["labels"] = [excerpt(label, 200) for label, _ in found]
    else:
        check["empty"] = EMPTY
    if schema.get("format") in answer_checks.FORMATS and kind == "string":
        check["format"] = schema["format"]
    for key, valid in (("minimum", answer_checks.bound), ("maximum", answer_checks.bound),
                       ("minLength", answer_checks.count), ("maxLength", answer_checks.count),
                       ("minItems", answer_checks.count), ("maxItems", answer_checks.count)):
        if valid(schema.get(key)) is not None:
            check[key] = schema[key]
    return Field(name, str(kind), tuple(found or ()), required, default, check)


def _question(wanted: Field, schema: dict[str, Any]) -> dict[str, Any]:
    """The property's question: its title, description and every rule the answer must keep."""
    title, check = wanted.check["title"], wanted.check
    notes = [str(schema.get("description") or "")]
    if "format" in check:
        notes.append(f"格式：{answer_checks.FORMAT_HINT[check['format']]}")
    elif schema.get("format"):
        notes.append(f"格式：{schema['format']}")
    if wanted.kind in ("number", "integer"):
        bounds = [f"≥ {check['minimum']}" if "minimum" in check else "",
                  f"≤ {check['maximum']}" if "maximum" in check else ""]
        said = "整数" if wanted.kind == "integer" else "数字"
        notes.append(said + (f"（{' '.join(b for b in bounds if b)}）" if any(bounds) else ""))
    for low, high, unit, what in (("minLength", "maxLength", "个字", "长度"), ("minItems", "maxItems", "项", "可选")):
        limits = [f"至少 {check[low]} {unit}"] if low in check else []
        limits += [f"至多 {check[high]} {unit}"] if high in check else []
        if limits:
            notes.append(f"{what} {'，'.join(limits)}")
    if wanted.defaulted:
        notes.append(f"默认：{wanted.default}")
    notes.append("必填" if wanted.required else "可不填")
    text = f"{title}\n" + "；".join(n for n in notes if n)
    if wanted.labels:
        options = [{"label": label, "description": ""} for label in check["labels"]]
    else:
        options = [{"label": WRITE, "description": "在「其他」中写下回答"},
                   {"label": EMPTY, "description": "使用默认值" if wanted.defaulted else "不填写"}]
    header = title if len(title) <= HEADER_MAX else title[:HEADER_MAX - 1] + "…"
    return {"question": text[:QUESTION_MAX], "header": header, "options": options,
            "multiSelect": wanted.kind == "choices"}


RESPONSE_QUESTION = {"question": "提交这些回答，还是拒绝提供？", "header": "回应",
                     "options": [{"label": SUBMIT, "description": ""}, {"label": DECLINE, "description": ""}]}
RESPONSE_CHECK = {"role": answer_checks.RESPONSE, "decline": DECLINE}


def elicitation(*, host: str, server: str, message: str, schema: Any, cwd: str, session_id: str,
                audit: dict[str, Any]) -> Prompt | None:
    """An MCP server's elicitation as a form; HostEventError for a schema that is not one (not an
    object of flat properties of the kinds a form asks); None for a valid one larger than any
    surface here shows (no decision)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        raise HostEventError("requested_schema must be an object schema with properties")
    listed = schema.get("required")
    required: list[Any] = listed if isinstance(listed, list) else []
    properties = schema["properties"]
    if not properties:
        raise HostEventError("requested_schema has no properties: there is nothing to ask")
    if len(properties) > MAX_FIELDS:
        return None
    fields = [_field(str(name), value, name in required) for name, value in properties.items()]
    if any(len(wanted.labels) > MAX_CHOICES for wanted in fields):
        return None
    questions = [_question(wanted, properties[wanted.name]) for wanted in fields]
    head = f"{context_line(host, cwd, session_id)} · MCP {excerpt(server, 60)}\n{excerpt(message, 600)}\n\n"
    questions[0]["question"] = (head + questions[0]["question"])[:QUESTION_MAX]
    questions.append(dict(RESPONSE_QUESTION))
    checks = (*(wanted.check for wanted in fields), RESPONSE_CHECK)
    return Prompt(kind="elicitation", questions=questions, audit=audit, fields=tuple(fields), checks=checks)


def elicitation_content(prompt: Prompt, answer: Answer) -> tuple[str, dict[str, Any] | None]:
    """(``accept`` with the content, ``decline``) for the person's answer, or ("", None) when it
    does not make a valid content (every surface refuses such a submit: this only guards an answer
    recorded otherwise); then no decision, and the host asks in its own dialog."""
    items = answer.answers
    last = items[len(prompt.fields)] if len(items) > len(prompt.fields) else {}
    if DECLINE in (last.get("selectedLabels") or []):
        return "decline", None
    given = [([str(label) for label in item.get("selectedLabels") or []], str(item.get("customInput") or "").strip())
             for item in items[:len(prompt.fields)]]
    try:
        answer_checks.enforce([wanted.check for wanted in prompt.fields], given)
        content: dict[str, Any] = {}
        for wanted, (labels, text) in zip(prompt.fields, given):
            value = _value(wanted, labels, text)
            if value is not None:
                content[wanted.name] = value
    except AnswerRefused:
        return "", None
    if len(given) < len(prompt.fields):
        return "", None
    return "accept", content


def _value(wanted: Field, labels: list[str], text: str) -> Any:
    """The property's value from its answer (already checked), None when it is left out."""
    if wanted.labels:
        mapping = dict(zip(wanted.check["labels"], (value for _, value in wanted.labels)))
        chosen = [mapping[label] for label in labels if label in mapping]
        if chosen:
            return chosen if wanted.kind == "choices" else chosen[0]
    elif text:
        return answer_checks.value_of(wanted.check, text)
    return wanted.default if wanted.defaulted else None
