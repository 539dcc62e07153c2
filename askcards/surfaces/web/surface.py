"""The web panel as a surface: what an ask's show, withdraw and delivered result push to the
session's web user."""
from __future__ import annotations

from typing import Any

from askcards.wake import events
from askcards.models import Ask, Session
from askcards.tools import dingtalk_ask_user_question as dt

from ..base import Surface
from .messages import cancelled_message, history_add
from .presence import is_present, panel_key


class WebSurface(Surface):
    name = "web"

    def reachable(self, session: Session, tool: str) -> bool:
        return tool == "ask_user_questions" and bool(session.web_user) and is_present(session.web_user)

    def accompanies(self, session: Session, tool: str) -> bool:
        """A DingTalk form is on its card, and also on the panel of the session's web user
        (granted: tool_call checks it), whether or not a panel is open now: one opened later
        lists it. The panel never decides ``no_surface`` for it."""
        return tool == dt.NAME and session.platform == Session.Platform.DINGTALK and bool(session.web_user)

    def deliver(self, ask: Ask) -> None:
        """Nothing to create up front: the panel is pushed after activation."""

    def show(self, ask: Ask) -> None:
        self._push(ask, {"type": "panel.show", "ask_id": ask.id})

    def withdraw(self, ask: Ask) -> None:
        """Everything the panel says about the ending is in the message, and for a question ask its
        history line too (``history``: None when the history does not list it), made once here
        rather than read again by every socket of the user; their sockets re-read a DingTalk
        form's, which is the panel user's own respondent row. The push goes to the session's web
        user only, whom the agent had granted when the ask was made (``tool_call``)."""
        if not ask.session.web_user:
            return
        message: dict[str, Any] = {"type": "panel.withdraw", "ask_id": ask.id, "message": cancelled_message(ask)}
        if ask.tool != dt.NAME:
            message["history"] = history_add(ask)
        self._push(ask, message)

    def result_delivered(self, ask: Ask) -> None:
        self._push(ask, {"type": "panel.delivered", "ask_id": ask.id})

    def _push(self, ask: Ask, message: dict[str, Any]) -> None:
        if ask.session.web_user:
            events.publish([(panel_key(ask.session.web_user), message)])
