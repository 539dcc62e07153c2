"""``ask_user_questions`` as the host's own form: an MCP ``elicitation/create`` (form mode) that the
host shows its user, and the content it sends back read as the question tool's answers.

What the elicitation schema can express, and what it cannot (said in the README too):

- each question is one field ``q<n>``: a single select a string with ``oneOf`` ``{const, title}``
  (the option's label), a multi select an array of them; the question text is the field's
  ``description``, its header the ``title``. The schema requires a choice, as it cannot say "a
  choice or your own words"; content with only the words is still taken, as the panel takes it;
- the 其他（可选） box is a second, optional string field ``q<n>_other`` (at most
  ``ANSWER_TEXT_MAX_CHARS``);
- an option's description and preview, and markdown in the question, have no place in the schema:
  the host shows the labels only.

Plain data in, data out: no models, no services.
"""
from __future__ import annotations

from typing import Any

from .base import ANSWER_TEXT_MAX_CHARS

OTHER = "其他（可选）"


class FormContentError(ValueError):
    """The host's content does not answer the form (a value that is none of the options)."""


def _field(index: int) -> str:
    return f"q{index + 1}"


def elicitation(questions: list[dict[str, Any]], *, message: str) -> dict[str, Any]:
    """The ``elicitation/create`` params (form mode) asking these questions."""
    properties: dict[str, Any] = {}
    for index, question in enumerate(questions):
        options = [{"const": option["label"], "title": option["label"]} for option in question.get("options", [])]
        header = question.get("header") or question["question"]
        if question.get("multiSelect"):
            field: dict[str, Any] = {"type": "array", "title": header, "description": question["question"],
                                     "items": {"anyOf": options}, "minItems": 1}
        else:
            field = {"type": "string", "title": header, "description": question["question"], "oneOf": options}
        properties[_field(index)] = field
        properties[f"{_field(index)}_other"] = {"type": "string", "title": f"{header}：{OTHER}",
                                                "maxLength": ANSWER_TEXT_MAX_CHARS}
    return {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties,
                            "required": [_field(index) for index in range(len(questions))]},
    }


def answers(questions: list[dict[str, Any]], content: Any) -> list[dict[str, Any]]:
    """The host's ``accept`` content as ``ask_user_questions`` answers ``[{question,
    selectedLabels, customInput}]``; FormContentError for content that is not this form's."""
    if not isinstance(content, dict):
        raise FormContentError("the form's content must be an object")
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
