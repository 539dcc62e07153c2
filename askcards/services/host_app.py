"""The MCP App (``askcards.mcp.apps``): the form a host that renders MCP Apps shows for an
``ask_user_questions`` call, answered there as one more surface, ``host_app``.

The app knows the tool call's arguments (the questions), never the ask's id: ``host_app_ask``
finds the ask those questions made among the caller's own — its agent (the Bearer key) and the
session its URL names — and ``host_app_answer`` answers one of those only, through ``ask_answer``,
the path of the panel and the cards: the first answer wins, and every other surface then says
「已在其他地方作答。」. Another agent's ask, or this agent's in another session, is "no such ask".
"""
from __future__ import annotations

import re
from typing import Any

from django.db.models import QuerySet

from askcards.errors import InvalidInput, NotFound
from askcards.models import Agent, Ask, Session
from askcards.surfaces import web
from askcards.tools import ask_user_questions

from .asks import AnswerOutcome, ask_answer

HOST_APP_SURFACE = "host_app"  # an answer given in the MCP App a host rendered
ASK_ID = re.compile(r"q_[0-9a-f]{32}")
RECENT_ASKS = 20  # the caller's latest asks in the session that a lookup compares
MAX_QUESTIONS = 4  # as ask_user_questions takes them
QUESTION_MAX_CHARS = 2000


def _question_texts(questions: Any) -> list[str]:
    """The questions' texts, from the tool call's ``questions`` (objects with ``question``) or
    from the texts themselves; InvalidInput otherwise."""
    expected = "questions must be the tool call's questions: a list of 1 to 4 objects with a question text"
    if not isinstance(questions, list) or not 1 <= len(questions) <= MAX_QUESTIONS:
        raise InvalidInput(expected)
    texts = []
    for item in questions:
        text = item.get("question") if isinstance(item, dict) else item
        if not isinstance(text, str) or not 1 <= len(text) <= QUESTION_MAX_CHARS:
            raise InvalidInput(expected)
        texts.append(text)
    return texts


def _asks(agent: Agent, session: Session) -> QuerySet[Ask]:
    return Ask.objects.filter(agent=agent, session=session, tool=ask_user_questions.NAME).select_related("session", "agent")


def host_app_ask(*, agent: Agent, session: Session, questions: Any) -> Ask | None:
    """The ask a tool call with these questions made: among the caller's latest asks in this
    session with the same question texts, the newest one waiting for an answer, else the newest
    that has ended (a view shown again after the call returned). None while the call's ask is
    not yet delivered (reserved), or when there is none."""
    texts = _question_texts(questions)
    recent = list(_asks(agent, session).exclude(status=Ask.Status.RESERVED).order_by("-created_at", "-id")[:RECENT_ASKS])
    matching = [ask for ask in recent if [q.get("question") for q in ask.questions or []] == texts]
    return next((ask for ask in matching if ask.status == Ask.Status.PENDING), matching[0] if matching else None)


def host_app_view(ask: Ask) -> dict[str, Any]:
    """The ask as the app shows it: what the panel shows of it (who asks, in which conversation,
    the questions, the deadline), and how it stands."""
    return {**web.ask_message(ask), "status": ask.status, "reason": ask.reason or None}


def host_app_answer(*, agent: Agent, session: Session, ask_id: Any, answers: Any) -> AnswerOutcome:
    """The person answered in the app: ``ask_answer`` on surface ``host_app`` (its answer check,
    the first-answer-wins transition). Only the caller's own asks in this session; the outcome's
    ask is read again, so a late answer says how the ask ended."""
    if not isinstance(ask_id, str) or not ASK_ID.fullmatch(ask_id):
        raise InvalidInput("askId must be the id of the ask the app shows, like q_<32 hex>")
    ask = _asks(agent, session).filter(pk=ask_id).first()
    if ask is None:
        raise NotFound(f"no ask {ask_id} of this agent in this session")
    outcome = ask_answer(ask_id=ask.id, answers=answers, surface=HOST_APP_SURFACE, ask=ask)
    ask.refresh_from_db()
    return AnswerOutcome(outcome.accepted, ask, outcome.reason, outcome.detail)
