"""`ask_user_questions` (Claude Code compatible; Feishu seed §4.3, SPEC §4.1)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import answer_checks
from .base import ANSWER_MAX_CHARS, ANSWER_TEXT_MAX_CHARS, AskRequest, Tool, ToolInputError

NAME = "ask_user_questions"

DESCRIPTION = (
    "Ask the user 1-4 multiple-choice questions and wait for the answers. Use it when you need the "
    "user's decision to continue. Each question has a short header (max 12 characters), the question "
    "text and 2-4 options with unique labels; set multiSelect to allow several options. The user can "
    "always answer in their own words instead (an 'Other' box is added for you, do not add one). The "
    "result is {\"answers\": [{\"question\", \"selectedLabels\", \"customInput\"}]}, or "
    "{\"error\", \"reason\"} when the user could not be asked or did not answer. Wait for the tool "
    "result; do not ask the user to reply in the chat instead."
)

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["questions"],
    "properties": {
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "description": "The questions to ask (1-4).",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["question", "header", "options"],
                "properties": {
                    "question": {"type": "string", "minLength": 1, "maxLength": 2000},
                    "header": {"type": "string", "minLength": 1, "maxLength": 12},
                    "options": {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 4,
                        "description": "2-4 options; labels must be unique within the question.",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["label"],
                            "properties": {
                                "label": {"type": "string", "minLength": 1, "maxLength": 200},
                                "description": {"type": "string", "maxLength": 1000},
                            },
                        },
                    },
                    "multiSelect": {"type": "boolean", "default": False},
                },
            },
        }
    },
}


class AskUserQuestions(Tool):
    name = NAME
    description = DESCRIPTION
    input_schema = INPUT_SCHEMA
    blocking = True

    def parse(self, arguments: dict[str, Any]) -> AskRequest:
        """The schema-valid arguments as the ask's request; labels unique and nothing blank."""
        questions = []
        for index, raw in enumerate(arguments["questions"]):
            labels = [option["label"] for option in raw["options"]]
            if len(set(labels)) != len(labels):
                raise ToolInputError(f"arguments.questions[{index}].options: labels must be unique within a question")
            if not raw["question"].strip() or not raw["header"].strip() or not all(label.strip() for label in labels):
                raise ToolInputError(f"arguments.questions[{index}]: question, header and labels must not be blank")
            questions.append(
                {
                    "question": raw["question"],
                    "header": raw["header"],
                    "options": [
                        {"label": option["label"], "description": option.get("description", "")}
                        for option in raw["options"]
                    ],
                    "multiSelect": bool(raw.get("multiSelect", False)),
                }
            )
        return AskRequest(questions=questions, title=questions[0]["header"])

    def check_answers(self, questions: list[dict[str, Any]], answers: Any) -> list[dict[str, Any]]:
        """The answers normalised; the questions' own checks (an agent host's elicitation,
        ``answer_checks``) refuse what their rules do not allow (AnswerRefused)."""
        normalised = normalise_answers(questions, answers)
        checks = [question.get(answer_checks.KEY) for question in questions]
        if any(checks):
            answer_checks.enforce(checks, [(answer["selectedLabels"], answer["customInput"] or "")
                                           for answer in normalised])
        return normalised


def normalise_answers(questions: Sequence[Mapping[str, Any]], answers: Any) -> list[dict[str, Any]]:
    """Map what a surface submitted onto the seed's answer shape, or raise ValueError.

    ``answers`` is one entry per question, in order: ``{"selectedLabels": [...], "customInput": str|None}``
    (``question`` may be present and must then match). Labels keep the order given, duplicates
    dropped. Single select: non-blank custom text wins and clears the labels. Multi select: both are
    kept. A question with neither is not an answer. Other text: at most ``ANSWER_TEXT_MAX_CHARS``
    characters each and ``ANSWER_MAX_CHARS`` together, on every surface.
    """
    if not isinstance(answers, list) or len(answers) != len(questions):
        raise ValueError(f"expected {len(questions)} answers, one per question")
    result = []
    written = 0  # characters of other text, against ANSWER_MAX_CHARS
    for index, (question, answer) in enumerate(zip(questions, answers)):
        if not isinstance(answer, dict):
            raise ValueError(f"answer {index} must be an object")
        if "question" in answer and answer["question"] != question["question"]:
            raise ValueError(f"answer {index} is for another question")
        labels = answer.get("selectedLabels") or []
        custom = answer.get("customInput")
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ValueError(f"answer {index}: selectedLabels must be a list of option labels")
        if custom is not None and not isinstance(custom, str):
            raise ValueError(f"answer {index}: customInput must be a string or null")
        if custom is not None and len(custom) > ANSWER_TEXT_MAX_CHARS:
            raise ValueError(f"answer {index}: customInput is longer than {ANSWER_TEXT_MAX_CHARS} characters")
        written += len(custom or "")
        if written > ANSWER_MAX_CHARS:
            raise ValueError(f"the answers' other texts are longer than {ANSWER_MAX_CHARS} characters in all")
        known = [option["label"] for option in question["options"]]
        unknown = [label for label in labels if label not in known]
        if unknown:
            raise ValueError(f"answer {index}: unknown option {unknown[0]!r}")
        # The order the person selected them in, as the surface delivered it (the reference keeps a
        # Feishu multi-select's form value order: ["B", "A"] reaches the model as ["B", "A"]);
        # a label given twice counts once.
        labels = list(dict.fromkeys(labels))
        custom_text = custom.strip() if custom else ""
        if not question["multiSelect"]:
            if len(labels) > 1:
                raise ValueError(f"answer {index}: a single-select question takes one option")
            if custom_text:
                labels = []
        if not labels and not custom_text:
            raise ValueError(f"answer {index}: choose an option or fill in the other box")
        result.append(
            {"question": question["question"], "selectedLabels": labels, "customInput": custom_text or None}
        )
    return result


TOOL = AskUserQuestions()
