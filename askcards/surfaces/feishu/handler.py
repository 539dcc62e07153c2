"""Feishu card callbacks (``card.action.trigger``): verify, parse, hand the click to its effect,
reply from the committed state.

The transport is Feishu's and lives here, as DingTalk's does in ``surfaces/dingtalk/handler.py``.
The click's effect — the event's receipt, the ask or progress card it names and what the click
does to it, in one transaction — is a service (``services.feishu_callback``), which the entry
point passes in (``askcards.callbacks``): surfaces never call services, the arrows run one way.
Every handled click is answered with HTTP 200 and ``{toast, card: {type: "raw", data: <the whole
card>}}``; no Feishu API is called on this path (the group's copy is PATCHed by the worker).
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from askcards.operators import metrics
from askcards import selectors
from askcards.errors import CallbackRefused
from askcards.models import Bot, ProgressCard

from . import cards, parse, security
from .surface import render

logger = logging.getLogger(__name__)


class Outcome(enum.Enum):
    """What a click did, as the person reads it on the toast."""

    SUBMITTED = "submitted"  # the answer counts
    CANCELLED = "cancelled"  # the progress card's cancel button ended the run
    STALE = "stale"  # nothing to do: the ask or card ended, or is unknown
    NOT_SENDER = "not_sender"  # only the message's sender may answer or cancel
    BLANK = "blank"  # a question was left without a selection or text
    REFUSED = "refused"  # the form's own rules refused the answer (``notice`` says why)


TOASTS: dict[Outcome, tuple[str, str]] = {
    Outcome.SUBMITTED: ("success", cards.TOAST_SUBMITTED),
    Outcome.CANCELLED: ("success", cards.TOAST_CANCELLED),
    Outcome.STALE: ("info", cards.TOAST_STALE),
    Outcome.NOT_SENDER: ("error", cards.TOAST_NOT_SENDER),
    Outcome.BLANK: ("warning", cards.TOAST_BLANK),
    Outcome.REFUSED: ("warning", cards.TOAST_REFUSED),
}


@dataclass
class Click:
    """A click's outcome and the progress card to answer with (None: no card to show)."""

    outcome: Outcome
    card: ProgressCard | None
    notice: str = ""


class Effect(Protocol):
    """What a verified, parsed click does: ``services.feishu_callback``. None when it changes
    nothing and shows nothing: a re-delivered event, or an action no card of askcards has."""

    def __call__(self, *, bot: Bot, action: parse.CardAction) -> Click | None: ...


def http_callback(app_id: str, headers: Mapping[str, str], raw_body: bytes, *, effect: Effect) -> tuple[int, dict[str, Any]]:
    """A callback of the Feishu app ``app_id``: ``(status, body)``. Refused before anything is
    read for an unknown or inactive app (404) or unreadable secrets (503); 401 when the token or
    signature does not verify; 400 for a body no Feishu callback has."""
    try:
        bot = selectors.callback_bot(platform=Bot.Platform.FEISHU, app_id=app_id)
    except CallbackRefused as refused:
        metrics.callback_refused("feishu", refused.cause)
        return refused.status, {"error": refused.message}
    try:
        payload = security.open_callback(headers, raw_body, encrypt_key=bot.encrypt_key,
                                         verification_token=bot.verification_token)
    except security.MalformedBody as exc:
        logger.warning("feishu callback for app %s unreadable: %s", app_id, exc)
        metrics.callback_refused("feishu", "malformed")
        return 400, {"error": str(exc)}
    except security.CallbackRejected as exc:
        logger.warning("feishu callback for app %s rejected: %s", app_id, exc)
        metrics.callback_refused("feishu", "verification")
        return 401, {"error": str(exc)}
    if payload.get("type") == "url_verification":
        return 200, {"challenge": payload.get("challenge", "")}
    try:
        action = parse.parse_card_action(payload)
    except parse.NotACardAction:
        return 200, {}
    except parse.MalformedCallback as exc:
        logger.warning("feishu callback for app %s malformed: %s", app_id, exc)
        metrics.callback_refused("feishu", "malformed")
        return 400, {"error": str(exc)}
    click = effect(bot=bot, action=action)
    return 200, response(click) if click is not None else {}


def response(click: Click) -> dict[str, Any]:
    """The callback's answer: the toast, and the card rendered from the committed state (after
    the effect's transaction: no lock held while rendering)."""
    toast_type, text = TOASTS[click.outcome]
    if click.outcome is Outcome.REFUSED:
        text = text.format(why=click.notice)
    return cards.callback_response(toast_type, text, render(click.card).card if click.card is not None else None)
