"""The web panel surface: asks pushed live to a logged-in user's browser over ``/ws/panel/``.

Presence is kept in the database (one row per connected socket, refreshed by a heartbeat, stale
after ``PRESENCE_TTL``), so every process agrees on whether a panel is connected — it decides
``no_surface``. Pushes go through the channel layer group of the user.
"""
from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from askcards import events
from askcards.models import Ask, PanelPresence, Session

from .base import Surface, SyncReport

logger = logging.getLogger(__name__)

PRESENCE_TTL = timedelta(seconds=90)
HEARTBEAT_SECONDS = 30


def panel_group(username: str) -> str:
    # Group names allow only [a-zA-Z0-9_.-]; usernames may hold anything else.
    return "askcards.panel." + hashlib.sha256(username.encode()).hexdigest()[:32]


def presence_touch(*, username: str, channel_name: str) -> None:
    PanelPresence.objects.update_or_create(
        channel_name=channel_name, defaults={"username": username, "last_seen": timezone.now()}
    )


def presence_drop(*, channel_name: str) -> None:
    PanelPresence.objects.filter(channel_name=channel_name).delete()


def is_present(username: str) -> bool:
    return PanelPresence.objects.filter(username=username, last_seen__gte=timezone.now() - PRESENCE_TTL).exists()


def presence_purge_stale() -> int:
    return PanelPresence.objects.filter(last_seen__lt=timezone.now() - PRESENCE_TTL).delete()[0]


MAX_KNOWN = 50  # asks a reconnecting panel may ask about (it lists those it still shows as open)


def ask_message(ask: Ask) -> dict[str, Any]:
    # ``deadline`` goes beyond SPEC §6.3's fields so the page can say until when it may answer.
    return {
        "type": "ask_user_questions",
        "requestId": ask.id,
        "sessionId": ask.session_id,
        "questions": ask.questions,
        "deadline": ask.deadline.isoformat(),
    }


def cancelled_message(ask: Ask) -> dict[str, str]:
    return {"type": "ask_user_questions_cancelled", "requestId": ask.id, "reason": ask.reason or ask.status}


def panel_snapshot(username: str, known: list[str]) -> list[dict[str, Any]]:
    """What a (re)connecting panel is sent: every pending web ask of the user, oldest first, then
    how each ask it still shows as open (``known``) ended while it was away."""
    mine = Ask.objects.filter(session__web_user=username)
    pending = [ask_message(ask) for ask in mine.filter(status=Ask.Status.PENDING).order_by("created_at", "id") if "web" in ask.surfaces]
    ended = mine.filter(pk__in=known[:MAX_KNOWN]).exclude(status__in=Ask.OPEN).order_by("created_at", "id")
    return pending + [cancelled_message(ask) for ask in ended]


class WebSurface(Surface):
    name = "web"

    def reachable(self, session: Session, tool: str) -> bool:
        return tool == "ask_user_questions" and bool(session.web_user) and is_present(session.web_user)

    def deliver(self, ask: Ask) -> None:
        """Nothing to create up front: the panel is pushed after activation."""

    def show(self, ask: Ask) -> None:
        self._push(ask, {"type": "panel.show", "ask_id": ask.id})

    def withdraw(self, ask: Ask) -> None:
        # Everything the panel says is in the message, so sockets need no re-read to say it.
        self._push(ask, {"type": "panel.withdraw", "message": cancelled_message(ask)})

    def sync_due(self, now: datetime, report: SyncReport) -> int:
        presence_purge_stale()
        return 0

    def _push(self, ask: Ask, message: dict[str, Any]) -> None:
        if ask.session.web_user:
            events.send([(panel_group(ask.session.web_user), message)])
