"""What the panel socket sends: an ask as the page shows it, its history line, the refusal a
client reads."""
from __future__ import annotations

import enum
from typing import Any

from django.conf import settings

from askcards import selectors
from askcards.models import Ask, Respondent, Session
from askcards.tools import dingtalk_ask_user_question as dt

from ..base import shortened


PLATFORM_NAMES = {"feishu": "飞书", "dingtalk": "钉钉", "wechat": "微信", "web": "网页"}


INVALID = "invalid"  # the refusal whose wire form carries what the person reads


def refusal_error(reason: enum.Enum, detail: str = "") -> str:
    """The ``error`` a client reads when its answer was refused, built from the outcome's reason
    (``services.AnswerRefusal``, ``PanelRefusal``, ``HostRefusal``) and its detail: the reason's
    name (``not_found``, ``not_pending``, …), or ``invalid: <detail>`` for an answer that does not
    fit the form. The panel socket's acks and the MCP App's tool errors are built here, alone."""
    return f"{INVALID}: {detail}" if reason.value == INVALID else str(reason.value)


def session_label(session: Session) -> str:
    """The session as a person recognises it: where it happens and with whom (its user's name in a
    private chat), else its key — never the ``s_…`` id."""
    platform = PLATFORM_NAMES.get(session.platform, session.platform)
    if session.platform == Session.Platform.WEB:
        return f"{platform}会话：{session.key}"
    if session.chat_type == Session.ChatType.GROUP:
        return f"{platform}群聊：{session.key}"
    return f"{platform}私聊：{session.user_name or session.user_id or session.key}"


def _who(ask: Ask) -> dict[str, str]:
    return {"sessionId": ask.session_id, "agent": ask.agent.name, "session": session_label(ask.session)}


def ask_message(ask: Ask) -> dict[str, Any]:
    """An open ask as the panel shows it: ``ask_user_questions`` (SPEC §6.3) or, for the DingTalk
    tool, ``dingtalk_form`` (its title, description and form fields, answered with the card's
    value shapes). ``deadline``, ``agent`` and ``session`` go beyond SPEC §6.3's fields so the page
    can say who asks and until when."""
    if ask.tool == dt.NAME:
        return {
            "type": "dingtalk_form",
            "requestId": ask.id,
            **_who(ask),
            "title": ask.title,
            "description": ask.description,
            "fields": ask.fields or [],
            "targeted": ask.target_type != Ask.Target.NONE,
            "respondents": len(ask.respondents.all()),
            "deadline": ask.deadline.isoformat(),
        }
    return {
        "type": "ask_user_questions",
        "requestId": ask.id,
        **_who(ask),
        "questions": ask.questions,
        "deadline": ask.deadline.isoformat(),
    }


def respondent_state(ask: Ask, row: Respondent) -> dict[str, Any]:
    """The panel user's own response as recorded: its status, where it was given, its answers."""
    return {"status": row.status, "surface": row.surface, "answers": _row_answers(ask, row)}


def responded_message(ask: Ask, row: Respondent) -> dict[str, Any]:
    """The panel user responded to a collection that still waits for others (here or on the card)."""
    return {"type": "dingtalk_form_responded", "requestId": ask.id, **respondent_state(ask, row)}


def page_size() -> int:
    """How many asks a panel socket shows at once."""
    return settings.ASKCARDS_PANEL_PAGE


def more_message(count: int) -> dict[str, Any]:
    """How many asks wait for the user beyond those the page shows (0: none)."""
    return {"type": "pending_more", "count": count}


def cancelled_message(ask: Ask) -> dict[str, str]:
    """How the ask ended; for an answer given on another surface, which one (``surface``, when the
    transition that ended it is the one telling: the page then says 「已在 MCP 客户端回答。」)."""
    message = {"type": "ask_user_questions_cancelled", "requestId": ask.id, "reason": ask.reason or ask.status}
    if ask.reason in (Ask.Reason.SUBMITTED, Ask.Reason.EMPTY) and ask.closed_on:
        message["surface"] = ask.closed_on
    return message


RESPONDED = (Respondent.Status.SUBMITTED, Respondent.Status.EMPTY, Respondent.Status.CANCELLED)
# The history (最近回答) is a reminder, sent whole on every connect: each answer in it is cut to
# this many characters (the agent and the admin have it whole).
HISTORY_ANSWER_CHARS = 500


def history_item(ask: Ask) -> dict[str, Any]:
    """A closed ask in the panel's history: who asked, what, how it ended and the panel user's own
    answers (a collection's other respondents are never shown; purged answers are gone)."""
    if ask.tool == dt.NAME:
        title = ask.title
        row = selectors.panel_respondent(ask)
    else:
        title = " · ".join(str(q.get("header") or q.get("question") or "") for q in ask.questions or [])
        owner = ask.sender_id.casefold()
        row = next((r for r in ask.respondents.all() if r.respondent_key == owner), None)
    if row is not None and row.status not in RESPONDED:
        row = None  # they did not respond (pending, missing)
    return {
        "requestId": ask.id,
        **_who(ask),
        "title": title,
        "status": ask.status,
        "reason": ask.reason,
        "respondent": row.status if row is not None else "",  # submitted | empty | cancelled | ""
        "surface": row.surface if row is not None else "",
        "closedAt": ask.closed_at.isoformat() if ask.closed_at else None,
        "purged": ask.answers_purged_at is not None,
        "answers": [{**item, "answer": shortened(str(item.get("answer", "")), max_chars=HISTORY_ANSWER_CHARS)}
                    for item in _row_answers(ask, row)] if row is not None else [],
    }


def _row_answers(ask: Ask, row: Respondent) -> list[dict[str, str]]:
    """One respondent's answers as ``[{question, answer}]`` texts, whatever the tool."""
    stored = row.answers
    if ask.tool == dt.NAME:
        return [dict(item) for item in (stored or {}).get("answers", [])] if isinstance(stored, dict) else []
    if not isinstance(stored, list):
        return []
    headers = {str(q.get("question")): str(q.get("header") or q.get("question")) for q in ask.questions or []}
    answers = []
    for item in stored:
        if not isinstance(item, dict):
            continue
        parts = [str(label) for label in item.get("selectedLabels") or []]
        if item.get("customInput"):
            parts.append(str(item["customInput"]))
        question = str(item.get("question") or "")
        answers.append({"question": headers.get(question, question), "answer": "、".join(parts)})
    return answers


def history_add(ask: Ask) -> dict[str, Any] | None:
    """``history_add`` for an ask that ended (read by the panel's queries), or None when the panel's
    history does not list it (still open, failed, a collection they were not asked in)."""
    if ask.is_open or ask.status == Ask.Status.FAILED:
        return None
    if ask.tool == dt.NAME and selectors.panel_respondent(ask) is None:
        return None
    return {"type": "history_add", "ask": history_item(ask)}
