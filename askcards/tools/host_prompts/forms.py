"""A host prompt on a DingTalk session: a DingTalk form, its checks, and its answers read back."""
from __future__ import annotations

from typing import Any

from .prompt import HEADER, Prompt, excerpt

# ------------------------------------------------------------------------------- DingTalk forms
# A DingTalk session shows a prompt as a DingTalk form (dingtalk_ask_user_question's fields): each
# question a required choice (one or several) and an optional 其他 text, the questions' own texts in
# the card's description. The form's answers ({label, answer text}) read back as the
# ask_user_questions answers the decisions are made from.

OTHER = "其他（可选）"


def _labels(prompt: Prompt) -> list[str]:
    """Each question's field label: its header, numbered when two would read the same."""
    headers = [str(q.get("header") or f"问题 {i + 1}") for i, q in enumerate(prompt.questions)]
    return [f"{i + 1}. {h}" if headers.count(h) > 1 else h for i, h in enumerate(headers)]


def dingtalk_form(prompt: Prompt) -> dict[str, Any]:
    """``dingtalk_ask_user_question`` arguments for the prompt."""
    fields: list[dict[str, Any]] = []
    for index, (question, label) in enumerate(zip(prompt.questions, _labels(prompt))):
        options = [{"value": f"o{n}", "text": str(option["label"])} for n, option in enumerate(question["options"])]
        kind = "MULTI_CHECKBOX_GROUP" if question.get("multiSelect") else "CHECKBOX_GROUP"
        fields.append({"name": f"q{index}", "label": label, "type": kind, "required": True, "options": options})
        fields.append({"name": f"q{index}_other", "label": f"{label} · {OTHER}", "type": "TEXT_AREA"})
    description = "\n\n".join(str(q["question"]) for q in prompt.questions)
    title = str(prompt.questions[0].get("header") or HEADER)
    return {"title": title, "description": excerpt(description, 3000), "fields": fields}


def dingtalk_checks(prompt: Prompt) -> list[dict[str, Any] | None]:
    """The answer checks of ``dingtalk_form``'s fields: each question's on its choice field, read
    with the words of its 其他 box; none on the boxes themselves."""
    checks: list[dict[str, Any] | None] = []
    for index, check in enumerate(prompt.checks):
        checks += [{**check, "other": f"q{index}_other"} if check else None, None]
    return checks


def answers_from_form(prompt: Prompt, form_answers: Any) -> list[dict[str, Any]]:
    """The form's recorded answers (``[{question: field label, answer: text}]``) as
    ask_user_questions answers, by question."""
    said = {str(item.get("question")): str(item.get("answer") or "")
            for item in form_answers or [] if isinstance(item, dict)}
    answers = []
    for question, label in zip(prompt.questions, _labels(prompt)):
        known = [str(option["label"]) for option in question["options"]]
        chosen = said.get(label, "")
        # Option texts are joined by ", " in the record: the known labels it holds, in their order.
        picked = [text for text in known if text == chosen or text in chosen.split(", ")]
        other = said.get(f"{label} · {OTHER}", "").strip()
        answers.append({"question": question["question"], "selectedLabels": picked, "customInput": other or None})
    return answers
