"""Shared reads and the public shapes of asks and events (API, events feed and webhooks agree)."""
from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from . import crypto
from .errors import BotSecretsUnreadable, NotFound, Unauthenticated
from .models import Agent, Ask, Bot, OutboxEvent, ProgressCard, Session


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def unique_row(queryset: QuerySet) -> Any:
    """The row a unique lookup finds, or None: a plain LIMIT 1, without ``first()``'s ORDER BY."""
    return next(iter(queryset[:1]), None)


BEARER = "Bearer"


def agent_for_authorization(header: str | bytes | None) -> Agent:
    """The agent whose key an ``Authorization: Bearer <agent key>`` header carries (the REST API
    and MCP share this one rule); Unauthenticated saying what is wrong otherwise. Lookup is by
    the key's hash, so no secret is ever compared byte by byte."""
    if isinstance(header, bytes):
        try:
            header = header.decode("ascii")
        except UnicodeError:
            raise Unauthenticated("Invalid agent key: it must be ASCII.", "invalid_key") from None
    parts = (header or "").split()
    if not parts:
        raise Unauthenticated(f"This endpoint needs 'Authorization: {BEARER} <agent key>' (the agent's REST key).")
    if parts[0].lower() != BEARER.lower():
        raise Unauthenticated(f"Invalid Authorization header: expected '{BEARER} <agent key>'.", "invalid_key")
    if len(parts) != 2:
        raise Unauthenticated(
            f"Invalid Authorization header: expected exactly one key after '{BEARER}', without spaces.", "invalid_key"
        )
    # The webhook secret is read only by the worker: an agent whose stored secret the current
    # ASKCARDS_SECRET_KEY cannot decrypt (askcards.E002) still uses the API.
    agent = Agent.objects.defer("webhook_secret").filter(key_hash=crypto.hash_agent_key(parts[1])).first()
    if agent is None:
        raise Unauthenticated("Invalid agent key.", "invalid_key")
    if not agent.is_active:
        raise Unauthenticated("This agent is deactivated.", "agent_inactive")
    return agent


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


# Platform callbacks name their bot by app id, many times a second, and bots change rarely: each
# process keeps the active bots it has read (secrets decrypted) for BOT_CACHE_SECONDS. A change
# saved in this process (admin, askcards_bot) clears the cache at once; other processes see it
# within BOT_CACHE_SECONDS. Unknown ids are not cached (a flood of made-up ids stays a 404 query).
BOT_CACHE_SECONDS = 10.0
_clock = time.monotonic  # the cache's clock (tests move it forward)
_active_bots: dict[tuple[str, str], tuple[float, Bot]] = {}
_unreadable_logged: set[tuple[str, str]] = set()
logger = logging.getLogger(__name__)


def active_bot(*, platform: str, app_id: str) -> Bot | None:
    """The active bot of this platform and app id, or None. Callers must not change it.

    Raises BotSecretsUnreadable when the bot's secrets cannot be decrypted (logged once per
    process and bot, without the secrets)."""
    key = (platform, app_id)
    cached = _active_bots.get(key)
    now = _clock()
    if cached is not None and cached[0] > now:
        return cached[1]
    try:
        bot = unique_row(Bot.objects.filter(platform=platform, app_id=app_id, is_active=True))
    except crypto.UndecryptableSecret:
        if key not in _unreadable_logged:
            _unreadable_logged.add(key)
            logger.error(
                "%s bot %s: its stored secrets cannot be decrypted with the current ASKCARDS_SECRET_KEY; "
                "its callbacks are refused (503). See manage.py check --database default.",
                platform,
                app_id,
            )
        raise BotSecretsUnreadable(
            f"{platform} app {app_id} is unavailable: the server cannot read its stored secrets "
            "(its operator has been told); try again later"
        ) from None
    if bot is None:
        _active_bots.pop(key, None)
    else:
        _active_bots[key] = (now + BOT_CACHE_SECONDS, bot)
    return bot


@receiver(post_save, sender=Bot)
@receiver(post_delete, sender=Bot)
def forget_active_bots(**kwargs: Any) -> None:
    _active_bots.clear()
    _unreadable_logged.clear()  # a bot changed: report an unreadable one again


def ask_get(*, agent: Agent, ask_id: str) -> Ask:
    ask = Ask.objects.select_related("session").filter(agent=agent, id=ask_id).first()
    if ask is None:
        raise NotFound(f"no ask {ask_id!r} (expected an ask id of this agent, like q_<32 hex>)")
    return ask


def ask_list(*, agent: Agent, session: Session | None = None, status: str | None = None) -> QuerySet[Ask]:
    asks = Ask.objects.filter(agent=agent).select_related("session").prefetch_related("respondents")
    if session is not None:
        asks = asks.filter(session=session)
    if status:
        asks = asks.filter(status=status)
    return asks.order_by("-created_at", "-id")


def pending_asks_of_session(session: Session) -> QuerySet[Ask]:
    return Ask.objects.filter(session=session, status=Ask.Status.PENDING).order_by("created_at", "id")


def ask_data(ask: Ask) -> dict[str, Any]:
    """The API shape of an ask (SPEC §7)."""
    data: dict[str, Any] = {
        "id": ask.id,
        "session": {"id": ask.session_id, "key": ask.session.key},
        "tool": ask.tool,
        "status": ask.status,
        "reason": ask.reason or None,
        "title": ask.title,
    }
    if ask.fields is not None:
        data["fields"] = ask.fields
    else:
        data["questions"] = ask.questions
    data["target"] = (
        None
        if ask.target_type == Ask.Target.NONE
        else {"type": ask.target_type, "id": ask.target_id}
    )
    data["respondents"] = [
        {
            "id": respondent.respondent_id,
            "status": respondent.status,
            "answered_at": _iso(respondent.answered_at),
            "surface": respondent.surface or None,
        }
        for respondent in ask.respondents.all()
    ]
    data["surfaces"] = ask.surfaces
    data["deadline"] = _iso(ask.deadline)
    data["created_at"] = _iso(ask.created_at)
    data["closed_at"] = _iso(ask.closed_at)
    data["result"] = ask.result
    return data


def event_data(event: OutboxEvent) -> dict[str, Any]:
    data = dict(event.data)
    if event.ask_id is not None:
        data["ask"] = ask_data(event.ask)
    if event.session_id is not None:
        data["session"] = {"id": event.session_id, "key": event.session.key}
    return {"seq": event.seq, "type": event.type, "created_at": _iso(event.created_at), "data": data}


def events_after(*, agent: Agent, after: int, limit: int = 100) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.filter(agent=agent, seq__gt=after)
        .select_related("ask__session", "session")
        .prefetch_related("ask__respondents")
        .order_by("seq")[:limit]
    )


def progress_data(card: ProgressCard) -> dict[str, Any]:
    message = card.card_messages.first()
    return {
        "session": {"id": card.session_id, "key": card.session.key},
        "status": card.shown_status,
        "title": card.title,
        "message_id": (message.message_id or None) if message else None,
        "synced": message is not None and message.synced_version >= message.version,
        "last_error": message.last_error if message else "",
    }
