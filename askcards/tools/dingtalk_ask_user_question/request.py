"""``dingtalk_ask_user_question``'s input: validation to typed requests (the reference's order and
error strings, reference/dingtalk-plugin.md §2), the form fields a request becomes (§2.2, §2.3),
and how a submitted form reads as answers and is checked against the form (§3).

Validation runs the reference's own checks first (action, target, timeoutMinutes, empty arrays),
so a model gets the reference's error strings, then the published schema for everything else.
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import jsonschema

from ..base import ActionRequest, AskRequest, ToolInputError, describe_schema_error, dumps
from .schema import (
    DEFAULT_TIMEOUT_MINUTES,
    FIELD_TYPES,
    INPUT_SCHEMA,
    MAX_ID_LENGTH,
    MAX_RESPONDENTS,
    MAX_TIMEOUT_MINUTES,
    OPTION_TYPES,
)
from .texts import CANCEL_NOT_ALLOWED_ERROR

# -- the reference's validation errors (reference §2.4) -----------------------------------------
UNKNOWN_ACTION_ERROR = "Unknown action"
TARGET_SHAPE_ERROR = "target must specify type and id"
TARGET_PROPERTY_ERROR = "Unknown target property"
TARGET_IDS_ERROR = (
    "target IDs must be raw non-empty DingTalk IDs without prefixes or whitespace (max 256 characters)"
)
TARGET_USER_RESPONDENTS_ERROR = "A user target can only be answered by that user; omit respondentUserIds"
TARGET_TYPE_ERROR = "target.type must be user or group"
TARGET_GROUP_RESPONDENTS_ERROR = "A group target requires 1–50 explicit respondentUserIds"
TARGET_UNIQUE_ERROR = "respondentUserIds must be unique"
TIMEOUT_ERROR = "timeoutMinutes requires target and must be an integer from 1 to 1440"
EMPTY_ERROR = "questions or fields must contain at least one item"

# -- texts of the form (reference §2.2) ---------------------------------------------------------
DEFAULT_TITLE = "需要你的确认"
TEXT_PLACEHOLDER = "请输入回答"


# ==== requests ================================================================================


@dataclass(frozen=True)
class Target:
    """A valid ``target`` (``parse_target``); the request carries it as its target_* fields."""

    type: str  # user | group
    id: str
    respondent_user_ids: tuple[str, ...]


@dataclass(frozen=True)
class CreateRequest(AskRequest):
    """``create``: ``title`` is the card's question_title, ``description`` its question_desc
    (a targeted card adds who asked and when it closes), ``fields`` the card's form.fields,
    ``questions`` the DSL as given when the call used it."""

    timeout_minutes: int | None = None  # targeted only


def _create_request(title: str, description: str, fields: list[dict[str, Any]],
                    questions: list[dict[str, Any]] | None, target: Target | None,
                    timeout_minutes: int | None) -> CreateRequest:
    return CreateRequest(
        title=title,
        description=description,
        fields=fields,
        questions=questions,
        respondent_ids=target.respondent_user_ids if target else (),
        target_type=target.type if target else "",
        target_id=target.id if target else "",
        timeout=timedelta(minutes=timeout_minutes) if timeout_minutes else None,
        timeout_minutes=timeout_minutes,
    )


@dataclass(frozen=True)
class ListRequest(ActionRequest):
    pass


@dataclass(frozen=True)
class CancelRequest(ActionRequest):
    question_id: str


def parse_request(arguments: Any) -> CreateRequest | ListRequest | CancelRequest:
    """Validate in the reference's order; raise ToolInputError with the text the model must see."""
    if not isinstance(arguments, dict):
        raise ToolInputError("arguments must be a JSON object")
    action = arguments.get("action")
    action = "create" if action is None else action
    if action not in ("create", "list", "cancel"):
        raise ToolInputError(UNKNOWN_ACTION_ERROR)
    if action == "list":
        _check_schema(arguments)
        return ListRequest()
    if action == "cancel":
        question_id = arguments.get("questionId")
        if not isinstance(question_id, str) or not question_id.strip():
            raise ToolInputError(CANCEL_NOT_ALLOWED_ERROR)
        _check_schema(arguments)
        return CancelRequest(question_id.strip())

    target = None
    if "target" in arguments:
        try:
            target = parse_target(arguments["target"])
        except ValueError as exc:
            raise ToolInputError(f"Error: {exc}") from None
    timeout = None
    if "timeoutMinutes" in arguments:
        timeout = arguments["timeoutMinutes"]
        if target is None or not _is_whole_number(timeout) or not 1 <= timeout <= MAX_TIMEOUT_MINUTES:
            raise ToolInputError(f"Error: {TIMEOUT_ERROR}")
        timeout = int(timeout)
    # The model's JSON, its shape checked below (the published schema) before it is read.
    questions: Any = arguments.get("questions")
    fields: Any = arguments.get("fields")
    has_questions = isinstance(questions, list) and len(questions) > 0
    has_fields = isinstance(fields, list) and len(fields) > 0
    if not has_questions and not has_fields and not _odd_value(questions) and not _odd_value(fields):
        raise ToolInputError(EMPTY_ERROR)
    if has_questions and has_fields:
        raise ToolInputError("arguments: give either questions or fields, not both")
    if "questionId" in arguments:
        raise ToolInputError("arguments.questionId: only action=cancel takes a questionId")
    _check_schema(arguments)

    if has_fields:
        form_fields = form_fields_from_fields(fields)
        title = _text(arguments.get("title")) or form_fields[0]["label"] or DEFAULT_TITLE
        description = _text(arguments.get("description")) or title
        dsl = None
    else:
        form_fields = form_fields_from_questions(questions)
        first = questions[0]
        title = _text(first.get("header")) or _text(first.get("question")) or DEFAULT_TITLE
        description = _text(first.get("question")) or title
        dsl = [dict(question) for question in questions]
    _check_form(form_fields, "fields" if has_fields else "questions")
    if target is not None and timeout is None:
        timeout = DEFAULT_TIMEOUT_MINUTES
    return _create_request(title, description, form_fields, dsl, target, timeout)


def parse_target(raw: Any) -> Target:
    """The reference's ``parseQuestionTarget``: raise ValueError with its message (no ``Error: `` prefix)."""
    if not isinstance(raw, dict) or "type" not in raw or "id" not in raw:
        raise ValueError(TARGET_SHAPE_ERROR)
    if set(raw) - {"type", "id", "respondentUserIds"}:
        raise ValueError(TARGET_PROPERTY_ERROR)
    target_id = _raw_id(raw["id"])
    respondents = raw.get("respondentUserIds")
    cleaned = [_raw_id(item) for item in respondents] if isinstance(respondents, list) else None
    if raw["type"] == "user" and "respondentUserIds" in raw:
        raise ValueError(TARGET_USER_RESPONDENTS_ERROR)
    if raw["type"] not in ("user", "group"):
        raise ValueError(TARGET_TYPE_ERROR)
    if raw["type"] == "user":
        return Target("user", target_id, (target_id,))
    if cleaned is None or not 1 <= len(cleaned) <= MAX_RESPONDENTS:
        raise ValueError(TARGET_GROUP_RESPONDENTS_ERROR)
    if len({item.casefold() for item in cleaned}) != len(cleaned):
        raise ValueError(TARGET_UNIQUE_ERROR)
    return Target("group", target_id, tuple(cleaned))


def _raw_id(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(TARGET_IDS_ERROR)
    value = value.strip()
    # The case-folded id is stored too (Respondent.respondent_key, 256): "ß" folds to "ss".
    bad = (not value or len(value.casefold()) > MAX_ID_LENGTH or ":" in value
           or any(ch.isspace() or unicodedata.category(ch) == "Cc" for ch in value))
    if bad:
        raise ValueError(TARGET_IDS_ERROR)
    return value


def _is_whole_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _odd_value(value: Any) -> bool:
    """Present but not an array: left to the schema, which says what was expected."""
    return value is not None and not isinstance(value, list)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


_VALIDATOR = jsonschema.Draft202012Validator(INPUT_SCHEMA)


def _check_schema(arguments: dict[str, Any]) -> None:
    errors = [error for error in _VALIDATOR.iter_errors(arguments) if error.validator != "anyOf"]
    if not errors:
        if _VALIDATOR.is_valid(arguments):
            return
        raise ToolInputError(
            "arguments: expected action create with questions or fields, list, or cancel with questionId"
        )
    error = sorted(errors, key=lambda e: (list(e.absolute_path), e.message))[0]
    raise ToolInputError(describe_schema_error(error))


def _check_form(form_fields: list[dict[str, Any]], source: str) -> None:
    """Beyond the reference (which lets these through and breaks the card or the answers)."""
    seen: dict[str, int] = {}
    for index, field in enumerate(form_fields):
        if field["name"] in seen:
            raise ToolInputError(
                f"arguments.{source}[{index}]: field name {field['name']!r} is already used by "
                f"{source}[{seen[field['name']]}]; names must be unique"
            )
        seen[field["name"]] = index
        if field["type"] in OPTION_TYPES and not field.get("options"):
            raise ToolInputError(
                f"arguments.{source}[{index}].options: a {field['type']} field needs at least one option"
            )


# ==== the form on the card ====================================================================


def form_fields_from_questions(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The light DSL as DingTalk form fields (reference §2.2)."""
    result = []
    for index, question in enumerate(questions):
        label = _text(question.get("header")) or _text(question.get("question")) or f"问题 {index + 1}"
        name = f"answer_{index}"
        options = question.get("options") or []
        if not options:
            result.append({"name": name, "label": label, "type": "TEXT", "required": True,
                           "placeholder": TEXT_PLACEHOLDER})
            continue
        choices = []
        for position, option in enumerate(options):
            text = _text(option.get("label")) or _text(option.get("description")) or f"选项 {position + 1}"
            choices.append({"value": _text(option.get("value")) or text, "text": text})
        kind = "MULTI_CHECKBOX_GROUP" if question.get("multiSelect") else "CHECKBOX_GROUP"
        result.append({"name": name, "label": label, "type": kind, "required": True, "options": choices})
    return result


def form_fields_from_fields(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Raw form fields, normalised leniently as the reference does (§2.3)."""
    result = []
    for index, field in enumerate(fields):
        name = _text(field.get("name")) or f"answer_{index}"
        kind = field.get("type") if field.get("type") in FIELD_TYPES else "TEXT"
        normalised: dict[str, Any] = {"name": name, "label": _text(field.get("label")) or name, "type": kind}
        for key, value in field.items():
            if key not in ("name", "label", "type", "options"):
                normalised[key] = value
        if isinstance(field.get("options"), list):
            normalised["options"] = [
                {"value": str(option.get("value") or f"option_{position + 1}"),
                 "text": str(option.get("text") or option.get("value") or f"option_{position + 1}")}
                for position, option in enumerate(field["options"])
                if isinstance(option, dict)
            ]
        result.append(normalised)
    return result


# ==== submitted values as answers (reference §3) ==============================================


@dataclass(frozen=True)
class Submission:
    answers: list[dict[str, str]]  # [{question: label, answer: text}], blank answers left out
    values: list[str]  # every raw submitted value, in field order (the card's selected_values)

    @property
    def empty(self) -> bool:
        return not self.answers

    @property
    def selected_text(self) -> str:
        return ", ".join(answer["answer"] for answer in self.answers)


def read_submission(form_fields: list[dict[str, Any]], form: dict[str, Any]) -> Submission:
    """Turn ``params.form`` into answers: option values become their texts, lists join with ``, ``.
    Only the card's own fields are read; a submission where every answer is blank is ``empty``."""
    answers, raw_values = [], []
    for field in form_fields:
        values = [value for value in _values(form.get(field["name"])) if value != ""]
        raw_values.extend(values)
        texts = {option["value"]: option["text"] for option in field.get("options") or []}
        answer = ", ".join(texts.get(value, value) for value in values)
        if answer:
            answers.append({"question": field["label"], "answer": answer})
    return Submission(answers, raw_values)


_CHOICE_OBJECT_TYPES = frozenset({"SELECT", "MULTI_SELECT"})  # sent as {index, value}
_MULTIPLE_CHOICE_TYPES = frozenset({"MULTI_SELECT", "MULTI_CHECKBOX_GROUP"})


def is_default(field: dict[str, Any], raw: Any) -> bool:
    """``raw`` is exactly the field's default, as JSON (``1`` is not the default ``true``)."""
    default = field.get("defaultValue", field.get("defautValue"))
    if default is None:
        return False
    return dumps_sorted(raw) == dumps_sorted(default)


def dumps_sorted(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def value_problem(field: dict[str, Any], raw: Any) -> str:
    """Why ``raw`` is not a value the card's form sends for ``field`` ("" when it is): a value of
    the wrong type for the field, or a choice that is not among its options (the shapes of
    reference §3). Read by ``answers.check_form``, which maps the reason to what the person reads."""
    kind = field["type"]
    if kind in ("CHECKBOX", "SWITCH"):
        return "" if isinstance(raw, bool) else "expected true or false"
    if kind == "NUMBER":
        return "" if _finite_number(raw) else "expected a number"
    if kind == "TEXT_ARRAY":
        texts = isinstance(raw, list) and all(isinstance(item, str) for item in raw)
        return "" if texts else "expected a list of texts"
    if kind not in OPTION_TYPES:
        return "" if isinstance(raw, str) else "expected a text"
    if kind in _CHOICE_OBJECT_TYPES:
        if not isinstance(raw, dict) or "value" not in raw:
            return "expected an object {index, value}"
        raw = raw["value"]
        if raw is None:
            return ""
    if kind in _MULTIPLE_CHOICE_TYPES:
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            return "expected a list of option values"
        chosen = raw
    elif isinstance(raw, str):
        chosen = [raw]
    else:
        return "expected one option value"
    allowed = {option["value"] for option in field.get("options") or []}
    if any(value not in allowed for value in chosen if value != ""):
        return "a value is not one of the field's options"
    return ""


def _finite_number(raw: Any) -> bool:
    """A JSON number (not a boolean), or a text holding one; never NaN or infinity."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        return False
    try:
        return math.isfinite(float(raw))
    except (ValueError, OverflowError):
        return False


def option_texts(field: dict[str, Any], raw: Any) -> list[str]:
    """The texts of the options a choice field's value picks (a value no option has, as it is)."""
    texts = {option["value"]: option["text"] for option in field.get("options") or []}
    return [texts.get(value, value) for value in _values(raw) if value != ""]


def _values(raw: Any) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, list):
        return [as_text(item) for item in raw if item is not None]
    if isinstance(raw, dict):
        # SELECT / MULTI_SELECT send {index, value}. Without "value" the reference shows
        # "[object Object]"; the object's JSON at least keeps what was sent.
        return _values(raw["value"]) if "value" in raw else [as_text(raw)]
    return [as_text(raw)]


def as_text(value: Any) -> str:
    """A JSON value as DingTalk shows it (an answer value, a card variable): strings as they are,
    ``true``/``false``, integral numbers without ``.0``, compact JSON for objects and arrays,
    and ``""`` for null."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list, tuple)):
        return dumps(value)
    return str(value)
