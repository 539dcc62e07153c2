"""``card.action.trigger`` callbacks into actions, form values into answers (reference §2.2, SPEC §4.1).

Parsing is defensive, as the platform and its SDKs deliver the same click in several shapes: the
nested ``{schema, header, event}`` envelope or a flattened one; ``action.value`` and
``form_value`` as objects or JSON strings; a multi-select as a list, a JSON-array string or a
scalar; an option wrapped as ``{"value": "0"}``. Anything else raises ``MalformedCallback`` with
a message saying what was wrong — never another exception.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from askcards.http import jsonlimits
from askcards.tools import ANSWER_TEXT_MAX_CHARS
from askcards.tools.ask_user_questions import normalise_answers

from .cards import ASK_KIND, PROGRESS_KIND
from .security import MAX_BODY_BYTES, microseconds

EVENT_TYPE = "card.action.trigger"
ASK_ID = re.compile(r"q_[0-9a-f]{32}")
FORM_NAME = re.compile(r"(?:ask|submit)_([0-9]{1,3})")
FIELD_NAME = re.compile(r"[qc]([0-9]{1,3})_([0-9]{1,3})")
OPTION_VALUE = re.compile(r"[0-9]{1,3}")
# Ids, names and kinds are short (an open_id is 35 characters, an event_id 32); 200 is the
# narrowest column they reach (CallbackReceipt.event_id; "respondent:<open_id>" in AskEvent.actor).
ID_MAX_CHARS = 200


class MalformedCallback(ValueError):
    """The payload is not a card action askcards can act on; it must change no state."""


class NotACardAction(MalformedCallback):
    """A well-formed callback of another event type (acknowledge it, ignore it)."""


class IncompleteAnswer(Exception):
    """Some questions have neither a selection nor other text: the person is asked again."""

    def __init__(self, questions: Sequence[int]):
        self.questions = tuple(questions)
        numbers = ", ".join(str(index + 1) for index in self.questions)
        super().__init__(f"question {numbers} has neither a selected option nor other text")


@dataclass(frozen=True)
class CardAction:
    operator: str  # open_id of the person who clicked
    kind: str  # feishu_ask | feishu_progress | anything else a card carries
    act: str  # submit | cancel | ...
    ask_id: str = ""  # requestId of a feishu_ask action
    session_id: str = ""
    sender: str = ""  # who may act, as rendered into the button
    form_index: int | None = None  # n of ask_{n} on the card that was clicked
    form_value: dict[str, Any] = field(default_factory=dict)
    event_id: str = ""
    message_id: str = ""
    chat_id: str = ""
    created_at: float | None = None  # unix seconds


def _object(value: Any, where: str, *, default: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object, or a JSON string holding one (both arrive from Feishu and its SDKs)."""
    if value is None and default is not None:
        return default
    if isinstance(value, (str, bytes)):
        try:
            value = jsonlimits.load(value, what=where, max_bytes=MAX_BODY_BYTES)
        except jsonlimits.JSONRefused as exc:
            raise MalformedCallback(str(exc)) from None
    if not isinstance(value, dict):
        raise MalformedCallback(f"{where} must be a JSON object")
    return value


def _string(value: Any, where: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or (required and not value):
        raise MalformedCallback(f"{where} must be a non-empty string" if required else f"{where} must be a string")
    if len(value) > ID_MAX_CHARS:
        raise MalformedCallback(f"{where} is longer than {ID_MAX_CHARS} characters")
    return value


def _form_index(name: str, form_value: Mapping[str, Any]) -> int | None:
    """The form's position on the clicked card: from the submit button's name, else the field keys."""
    indexes = {int(match.group(1)) for key in form_value if (match := FIELD_NAME.fullmatch(str(key)))}
    if len(indexes) > 1:
        raise MalformedCallback("form_value mixes fields of several forms")
    named = FORM_NAME.fullmatch(name)
    if named:
        index = int(named.group(1))
        if indexes and indexes != {index}:
            raise MalformedCallback(f"form_value fields do not belong to form {name!r}")
        return index
    return indexes.pop() if indexes else None


def parse_card_action(payload: Any) -> CardAction:
    """A ``card.action.trigger`` callback (already verified and decrypted) as a ``CardAction``."""
    body = _object(payload, "callback body")
    if isinstance(body.get("event"), dict):
        header = _object(body.get("header"), "header", default={})
        event = body["event"]
        event_type = header.get("event_type")
        if event_type is not None and event_type != EVENT_TYPE:
            raise NotACardAction(f"event type {str(event_type)[:60]!r} is not {EVENT_TYPE}")
    else:  # flattened envelope (SDK / long connection, the "configuring interactions" example)
        header, event = {}, body
    operator = _object(event.get("operator"), "event.operator", default={})
    open_id = _string(operator.get("open_id", event.get("open_id")), "event.operator.open_id", required=True)
    action = _object(event.get("action"), "event.action")
    value = _object(action.get("value"), "event.action.value")
    kind = _string(value.get("kind"), "event.action.value.kind", required=True)
    ask_id = ""
    if kind == ASK_KIND:
        ask_id = _string(value.get("requestId"), "event.action.value.requestId", required=True)
        if not ASK_ID.fullmatch(ask_id):
            raise MalformedCallback("event.action.value.requestId is not an ask id (q_ and 32 hex digits)")
    needs_session = kind in (ASK_KIND, PROGRESS_KIND)
    session_id = _string(value.get("sessionId"), "event.action.value.sessionId", required=needs_session)
    form_value = _object(action.get("form_value"), "event.action.form_value", default={})
    context = _object(event.get("context"), "event.context", default={})
    return CardAction(
        operator=open_id,
        kind=kind,
        act=_string(value.get("act"), "event.action.value.act"),
        ask_id=ask_id,
        session_id=session_id,
        sender=_string(value.get("sender"), "event.action.value.sender"),
        form_index=_form_index(_string(action.get("name"), "event.action.name"), form_value),
        form_value=form_value,
        event_id=_string(header.get("event_id"), "header.event_id"),
        message_id=_string(context.get("open_message_id", event.get("open_message_id")), "open_message_id"),
        chat_id=_string(context.get("open_chat_id", event.get("open_chat_id")), "open_chat_id"),
        created_at=_created_at(header.get("create_time")),
    )


def _created_at(value: Any) -> float | None:
    if value is None:
        return None
    seconds = microseconds(value)
    if seconds is None:
        raise MalformedCallback("header.create_time must be a microsecond timestamp")
    return seconds


def _selection(value: Any, *, multi: bool, options: int, where: str) -> list[int]:
    """Option indexes of a select's form value; missing, "" and [] all mean nothing selected."""
    if isinstance(value, str) and multi and value.startswith("["):
        try:
            value = jsonlimits.load(value, what=where, max_bytes=MAX_BODY_BYTES)
        except jsonlimits.JSONRefused as exc:
            raise MalformedCallback(str(exc)) from None
    items = value if isinstance(value, list) else [value]
    indexes: list[int] = []
    for item in items:
        if isinstance(item, dict):  # an option wrapped as {"value": "0"}
            if "value" not in item:
                raise MalformedCallback(f"{where} holds an object without an option value")
            item = item["value"]
        if item is None or item == "":
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int)) or not OPTION_VALUE.fullmatch(str(item)):
            raise MalformedCallback(f"{where} holds {str(item)[:20]!r}, not an option value")
        if int(item) >= options:
            raise MalformedCallback(f"{where}: option {item} does not exist (the question has {options} options)")
        if int(item) not in indexes:
            indexes.append(int(item))
    if len(indexes) > 1 and not multi:
        raise MalformedCallback(f"{where} selects several options of a single-select question")
    return indexes


def _custom(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise MalformedCallback(f"{where} must be text")
    # Feishu's input sends at most its max_length (1000); the server's bound is every surface's.
    if len(value) > ANSWER_TEXT_MAX_CHARS:
        raise MalformedCallback(f"{where} is longer than {ANSWER_TEXT_MAX_CHARS} characters")
    return value


def form_answers(
    questions: Sequence[Mapping[str, Any]], form_value: Mapping[str, Any], form_index: int | None
) -> list[dict[str, Any]]:
    """The answers of a submitted ask form, in the result shape of SPEC §4.1.

    Single select: non-blank other text wins and ``selectedLabels`` is ``[]``. Multi select: the
    selected labels and the other text are both kept. Raises ``IncompleteAnswer`` when a question
    has neither (the card keeps its form), ``MalformedCallback`` for values the form cannot produce.
    """
    prefixed = form_index is not None and any(
        (match := FIELD_NAME.fullmatch(str(key))) and int(match.group(1)) == form_index for key in form_value
    )
    answers, blank = [], []
    for i, question in enumerate(questions):
        # Cards rendered before names were made unique per card used plain q{i} / c{i}.
        select_key, custom_key = (f"q{form_index}_{i}", f"c{form_index}_{i}") if prefixed else (f"q{i}", f"c{i}")
        multi = bool(question.get("multiSelect"))
        indexes = _selection(form_value.get(select_key), multi=multi, options=len(question["options"]),
                             where=f"question {i + 1} ({select_key})")
        custom = _custom(form_value.get(custom_key), f"question {i + 1} other text ({custom_key})")
        labels = [question["options"][index]["label"] for index in indexes]
        if custom.strip() and not multi:
            labels = []
        if not labels and not custom.strip():
            blank.append(i)
        answers.append({"selectedLabels": labels, "customInput": custom})
    if blank:
        raise IncompleteAnswer(blank)
    try:
        return normalise_answers(list(questions), answers)
    except ValueError as exc:  # the same rules as every other surface; reached only by forged values
        raise MalformedCallback(str(exc)) from None
