"""The reads services, the API and MCP share: sessions, grants, asks, a card click's ask, events."""
from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from ..db import statements
from ..errors import NotFound
from ..models import Agent, Ask, Bot, OutboxEvent, ProgressCard, Session
from .rows import unique_row


def clicked_ask(bot: Bot, ask_id: str, message_id: str) -> tuple[Ask | None, Any]:
    """A card click's ask (a session of ``bot``'s, ``session`` loaded) and the progress card whose
    message was clicked, in one read (``db.statements.clicked_ask``): the click path's hot read.
    (None, None) when ``bot`` has no such ask."""
    return statements.clicked_ask(ask_id=ask_id, bot_id=bot.pk, platform=bot.platform, message_id=message_id or "")


def session_get(*, agent: Agent, session_ref: str) -> Session:
    """A session of this agent by id or key; another agent's session is simply not found."""
    session = (
        Session.objects.select_related("bot", "parent")
        .filter(agent=agent)
        .filter(id=session_ref)
        .first()
    ) or Session.objects.select_related("bot", "parent").filter(agent=agent, key=session_ref).first()
    if session is None:
        raise NotFound(f"no session {session_ref!r} (expected a session id or key of this agent)")
    return session


def web_user_granted(*, agent: Agent, web_user: str) -> bool:
    """Whether an operator granted ``agent`` the Django user named ``web_user``. A username no
    user has is simply not granted: one query either way."""
    return agent.web_users.filter(**{get_user_model().USERNAME_FIELD: web_user}).exists()


def bot_granted(*, agent_id: int, bot_id: int) -> bool:
    """Whether an operator granted the agent ``agent_id`` the bot whose primary key is ``bot_id``."""
    return Agent.bots.through.objects.filter(agent_id=agent_id, bot_id=bot_id).exists()


def ask_get(*, agent: Agent, ask_id: str) -> Ask:
    """This agent's ask with its session (``db.statements.agent_ask``: every woken wait reads it)."""
    ask = statements.agent_ask(agent_id=agent.pk, ask_id=ask_id)
    if ask is None:
        raise NotFound(f"no ask {ask_id!r} (expected an ask id of this agent, like q_<32 hex>)")
    ask.agent = agent  # the row the caller holds: what reads ``ask.agent`` later (the panel's lines) reads no more
    return ask


def with_respondents(ask: Ask) -> Ask:
    """``ask`` with its respondents read into ``ask.respondents.all()``, in their order: what a
    woken wait renders (``db.statements.ask_respondents``, one statement)."""
    statements.ask_respondents(ask)
    return ask


def ask_list(*, agent: Agent, session: Session | None = None, status: str | None = None) -> QuerySet[Ask]:
    asks = Ask.objects.filter(agent=agent).select_related("session").prefetch_related("respondents")
    if session is not None:
        asks = asks.filter(session=session)
    if status:
        asks = asks.filter(status=status)
    return asks.order_by("-created_at", "-id")


def ask_page(*, agent: Agent, session: Session | None = None, status: str | None = None, limit: int) -> list[Ask]:
    """The first ``limit`` asks of ``ask_list``.

    Filtered by status only, the page's ids come first, from ask_agent_status_created_idx alone
    (an index-only scan of that agent's rows of that status, newest first), then their rows by
    primary key: the page costs the same for a status with no rows, a rare one or a common one,
    on an agent's millionth ask as on its first. As one statement PostgreSQL would rather walk the
    agent's asks newest first and drop the other statuses' rows, which reads the whole history for
    a status with none (and the plan it keeps for a prepared statement did that for every status);
    tests/scale/test_api_lists_at_size.py."""
    asks = ask_list(agent=agent, session=session, status=status)
    if not status or session is not None:  # a session's asks: ask_session_status_created_idx, few rows
        return list(asks[:limit])
    newest = Ask.objects.filter(agent=agent, status=status).order_by("-created_at", "-id")
    ids = list(newest.values_list("id", flat=True)[:limit])
    return list(asks.filter(pk__in=ids)) if ids else []


def pending_asks_of_session(session: Session) -> QuerySet[Ask]:
    return Ask.objects.filter(session=session, status=Ask.Status.PENDING).order_by("created_at", "id")


def events_after(*, agent: Agent, after: int, limit: int = 100) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.filter(agent=agent, seq__gt=after)
        .select_related("ask__session", "session")
        .prefetch_related("ask__respondents")
        .order_by("seq")[:limit]
    )


def clicked_progress_card(bot: Bot, message_id: str, session_id: str, *, session: Session | None = None) -> ProgressCard | None:
    """The Feishu progress card a click came from: by its message, else the latest card of the
    session the click names (of ``bot``'s sessions only). ``session``, when the caller has it
    loaded, saves reading it again for the render; a card of another session (a forged mix of
    ids) is read with its own."""
    cards = ProgressCard.objects if session is not None else ProgressCard.objects.select_related("session")
    card = None
    if message_id:
        card = unique_row(cards.filter(
            card_messages__platform=Bot.Platform.FEISHU, card_messages__bot=bot, card_messages__message_id=message_id
        ))
    if card is None:
        card = cards.runs_of(session_id).filter(session__bot=bot).first()
    if card is not None and session is not None:
        if card.session_id != session.id:
            return clicked_progress_card(bot, message_id, session_id)
        card.session = session
    return card
