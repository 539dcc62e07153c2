"""How an ask reads to an operator (the admin's ask page): the question as the person sees it, the
answers as a table with a row per respondent, and the audit trail in words.

Read-only shaping of what is stored; what a question or a field means comes from the tools
(``askcards.tools``), so the page shows the same options, types and defaults as the cards do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from askcards.models import Ask, AskEvent, Respondent
from askcards.tools.dingtalk_ask_user_question.request import as_text
from askcards.tools.dingtalk_ask_user_question.schema import OPTION_TYPES

# The text box every ask_user_questions question shows next to its options (Feishu card, panel).
OTHER_BOX = "其他（可选）"

REASON_LABELS: dict[str, str] = {
    Ask.Reason.SUBMITTED: "answered",
    Ask.Reason.EMPTY: "submitted with nothing filled",
    Ask.Reason.COMPLETED: "everyone responded",
    Ask.Reason.BY_RESPONDENT: "cancelled by the respondent",
    Ask.Reason.BY_AGENT: "cancelled by the agent",
    Ask.Reason.BY_OPERATOR: "cancelled by an operator",
    Ask.Reason.SESSION_CANCELLED: "the task was cancelled on its progress card",
    Ask.Reason.PAUSE_FAILED: "the agent could not pause its task",
    Ask.Reason.HOST_GONE: "the agent host stopped waiting (timed out or interrupted)",
    Ask.Reason.HOST_HANDLED: "settled in the agent host's own terminal (its tool ran, or its turn ended)",
    Ask.Reason.CALLER_GONE: "the MCP client left its blocking call and did not come back for it (grace period)",
    Ask.Reason.DECLINED: "the person declined the form in their MCP client",
    Ask.Reason.DISMISSED: "the person closed the form in their MCP client without answering",
    Ask.Reason.TIMEOUT: "the deadline passed",
    Ask.Reason.SUPERSEDED_BY_QUESTION: "replaced by a newer question",
    Ask.Reason.SUPERSEDED_BY_MESSAGE: "replaced by a newer message",
    Ask.Reason.RESTART: "the agent restarted",
    Ask.Reason.DELIVERY_FAILED: "the card could not be delivered",
    Ask.Reason.NO_SURFACE: "nowhere to ask (no card, no panel)",
    Ask.Reason.NOT_AVAILABLE: "the session does not offer this tool",
}

KIND_LABELS: dict[str, str] = {
    AskEvent.Kind.CREATED: "Created",
    AskEvent.Kind.ACTIVATED: "Shown to the person",
    AskEvent.Kind.CLOSED: "Ended",
    AskEvent.Kind.RESPONDED: "A respondent answered",
    AskEvent.Kind.IGNORED: "Ignored (too late or not allowed)",
    AskEvent.Kind.SHOWN: "Shown",
    AskEvent.Kind.DELIVERED: "Result delivered to the agent",
    AskEvent.Kind.PURGED: "Answers purged",
}

RESPONDENT_STATUS_LABELS: dict[str, str] = {
    Respondent.Status.PENDING: "not yet answered",
    Respondent.Status.SUBMITTED: "answered",
    Respondent.Status.EMPTY: "submitted with nothing filled",
    Respondent.Status.CANCELLED: "cancelled",
    Respondent.Status.MISSING: "did not answer",
}

# DingTalk form field types (dingtalk_ask_user_question's FIELD_TYPES), as the card shows them.
FIELD_TYPE_LABELS: dict[str, str] = {
    "TEXT": "text",
    "TEXT_ARRAY": "list of texts",
    "TEXT_AREA": "multi-line text",
    "NUMBER": "number",
    "SELECT": "dropdown, one choice",
    "MULTI_SELECT": "dropdown, several choices",
    "DATE": "date",
    "TIME": "time",
    "DATETIME": "date and time",
    "CHECKBOX": "checkbox (yes / no)",
    "SWITCH": "switch (on / off)",
    "CHECKBOX_GROUP": "option group, one choice",
    "MULTI_CHECKBOX_GROUP": "option group, several choices",
}

ACTOR_KINDS = {"agent": "agent", "operator": "operator", "respondent": "respondent"}


# ------------------------------------------------------------------------------- the question


@dataclass(frozen=True)
class Option:
    label: str
    description: str = ""


@dataclass(frozen=True)
class Question:
    """An ask_user_questions question: radio buttons (or checkboxes) and the "other" box."""

    header: str
    text: str
    multiple: bool
    options: list[Option]
    other_box: str = OTHER_BOX


@dataclass(frozen=True)
class FormField:
    """A DingTalk form field, with its type in words."""

    name: str
    label: str
    type: str
    type_label: str
    required: bool
    default: str = ""
    placeholder: str = ""
    hidden: bool = False
    read_only: bool = False
    options: list[Option] = field(default_factory=list)


@dataclass(frozen=True)
class QuestionView:
    title: str
    description: str
    questions: list[Question]
    fields: list[FormField]


def question_view(ask: Ask) -> QuestionView:
    """The ask as the person sees it: ``questions`` for ask_user_questions, the form's ``fields``
    for a DingTalk card (a DingTalk question DSL call is shown as the form it became)."""
    if ask.fields is not None:
        return QuestionView(ask.title, ask.description, [], [_form_field(raw) for raw in ask.fields])
    questions = [
        Question(
            header=str(raw.get("header", "")),
            text=str(raw.get("question", "")),
            multiple=bool(raw.get("multiSelect")),
            options=[
                Option(str(option.get("label", "")), str(option.get("description") or ""))
                for option in raw.get("options") or []
            ],
        )
        for raw in ask.questions or []
    ]
    return QuestionView(ask.title, ask.description, questions, [])


def _form_field(raw: dict[str, Any]) -> FormField:
    kind = str(raw.get("type", "TEXT"))
    default = raw.get("defaultValue", raw.get("defautValue"))
    options = [Option(str(option.get("text", "")), "" if option.get("text") == option.get("value") else
                      f"value {option.get('value')}") for option in raw.get("options") or []]
    return FormField(
        name=str(raw.get("name", "")),
        label=str(raw.get("label", "")),
        type=kind,
        type_label=FIELD_TYPE_LABELS.get(kind, kind.lower()),
        required=bool(raw.get("required")),
        default="" if default is None else as_text(default),
        placeholder=str(raw.get("placeholder") or ""),
        hidden=bool(raw.get("hidden")),
        read_only=bool(raw.get("readOnly")),
        options=options if kind in OPTION_TYPES else [],
    )


# --------------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class ResultRow:
    respondent: str
    status: str
    status_label: str
    surface: str
    answered_at: Any
    cells: list[str]


@dataclass(frozen=True)
class ResultTable:
    columns: list[str]  # one per question / form field
    rows: list[ResultRow]
    purged: bool
    agent_reads: str  # the tool_result or message the agent was given


def result_table(ask: Ask, respondents: list[Respondent]) -> ResultTable:
    """One row per respondent, one column per question (header) or field (label)."""
    if ask.fields is not None:
        columns = [str(raw.get("label") or raw.get("name") or "") for raw in ask.fields]
    else:
        columns = [str(raw.get("header") or raw.get("question") or "") for raw in ask.questions or []]
    purged = ask.answers_purged_at is not None
    rows = [
        ResultRow(
            respondent=row.respondent_id,
            status=row.status,
            status_label=RESPONDENT_STATUS_LABELS.get(row.status, row.status),
            surface=row.surface,
            answered_at=row.answered_at,
            cells=_cells(columns, row.answers, ask.fields is not None),
        )
        for row in respondents
    ]
    result = ask.result or {}
    agent_reads = result.get("message") or result.get("tool_result") or ""
    return ResultTable(columns, rows, purged, str(agent_reads))


def _cells(columns: list[str], answers: Any, form: bool) -> list[str]:
    if answers is None:
        return ["" for _ in columns]
    if form:
        # DingTalk: {"answers": [{"question": <field label>, "answer": <text>}], "values": [...]}
        given: dict[str, str] = {}
        for item in (answers or {}).get("answers", []) if isinstance(answers, dict) else []:
            given.setdefault(str(item.get("question", "")), str(item.get("answer", "")))
        return [given.get(column, "") for column in columns]
    # ask_user_questions: one {"question", "selectedLabels", "customInput"} per question, in order.
    cells = []
    for index, _ in enumerate(columns):
        item = answers[index] if isinstance(answers, list) and index < len(answers) else {}
        parts = [str(label) for label in item.get("selectedLabels") or []]
        if item.get("customInput"):
            parts.append(f"其他：{item['customInput']}")
        cells.append("、".join(parts))
    return cells


# ------------------------------------------------------------------------------ the audit trail


def reason_label(reason: str) -> str:
    return REASON_LABELS.get(reason, reason)


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind)


def actor_label(actor: str) -> str:
    """``operator:alice`` → ``operator alice``; ``system`` stays."""
    kind, _, name = actor.partition(":")
    if name and kind in ACTOR_KINDS:
        return f"{ACTOR_KINDS[kind]} {name}"
    return actor


# What an ignored attempt was (AskEvent.detail["attempted"], before any "/<respondent status>").
ATTEMPT_LABELS: dict[str, str] = {
    "activate": "delivered after the ask had already ended",
    "not_respondent": "a click by someone who is not a respondent",
    "not_owner": "a click by someone other than the person asked",
    "no_identity": "a click that named nobody",
    "not_sender": "a click by someone other than the person asked",
    "invalid": "a submitted form that does not match the card",
    "malformed": "a click the card could not have sent",
    "blank": "a submit with nothing selected or filled",
    "late": "a click after the ask had ended",
    "closed": "a click after the ask had ended",
    "duplicate": "the same click delivered again",
    "again": "a second answer from a respondent who had answered",
}


def attempt_label(attempted: str) -> str:
    """``late/submitted`` → "a click after the ask had ended (answered)"; ``answered/submitted``
    (a transition that lost the race) → "tried to end it as answered (answered)"."""
    first, _, second = attempted.partition("/")
    if first in Ask.Status.values:
        return f"lost the race to end it as {first}" + (f" ({reason_label(second)})" if second else "")
    text = ATTEMPT_LABELS.get(first, first)
    if second:
        text += f" ({RESPONDENT_STATUS_LABELS.get(second, second)})"
    return text


def status_change(event: AskEvent) -> str:
    if event.from_status and event.from_status != event.to_status:
        return f"{event.from_status} → {event.to_status}"
    return event.to_status


def detail_text(event: AskEvent) -> str:
    """The audit row's detail in words: the ending's reason, an ignored attempt, an error."""
    detail = dict(event.detail or {})
    parts = []
    if "reason" in detail:
        parts.append(reason_label(str(detail.pop("reason"))))
    if "attempted" in detail:
        parts.append(attempt_label(str(detail.pop("attempted"))))
    if "respondent_status" in detail:
        status = str(detail.pop("respondent_status"))
        parts.append(RESPONDENT_STATUS_LABELS.get(status, status))
    if "tool" in detail:
        parts.append(f"tool {detail.pop('tool')}")
    parts.extend(f"{key}: {as_text(value)}" for key, value in sorted(detail.items()))
    return "; ".join(parts)
