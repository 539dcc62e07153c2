"""DingTalk card callbacks, over HTTP and over Stream: verify, parse, hand the click to its
effect, reply from the committed state.

The transport is DingTalk's and lives here. The click's effect — the signature pair's receipt,
the ask the card names and what the click does to it, in one transaction — is a service
(``services.dingtalk_callback``), which the entry points pass in (``askcards.callbacks`` for HTTP,
the ``askcards_dingtalk_stream`` command for Stream): surfaces never call services, the arrows
run one way.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from django.conf import settings
from django.db import close_old_connections

from askcards.operators import metrics
from askcards import selectors
from askcards.errors import CallbackRefused
from askcards.models import Bot

from . import callbacks
from .surface import callback_response

logger = logging.getLogger(__name__)


class Effect(Protocol):
    """What a verified, parsed click does: ``services.dingtalk_callback``. Returns the click's
    outcome (a ``services.ClickResult``), or None when it changes nothing (template noise, a card
    no ask owns); raises ``callbacks.ReplayedCallback`` when ``receipt`` was recorded before."""

    def __call__(self, *, bot: Bot, click: callbacks.CardCallback, receipt: str) -> Any: ...


def http_callback(client_id: str, headers: Mapping[str, str], raw_body: bytes, *,
                  effect: Effect) -> tuple[int, dict[str, Any]]:
    """An HTTP card callback of the DingTalk app ``client_id``: ``(status, body)``.

    DingTalk signs the timestamp, not the body (platform §1.4), so a bot without an api_secret
    accepts nothing here (register the route with one: ``askcards_dingtalk_register``), and each
    signature pair is accepted once: its receipt commits with the callback's effect, so a pair
    whose callback failed (rolled back) still works for DingTalk's retry, and any later use of an
    accepted pair — whatever body it carries — is refused with 401 and changes nothing.
    """
    try:
        bot = selectors.callback_bot(platform=Bot.Platform.DINGTALK, app_id=client_id)
    except CallbackRefused as refused:
        metrics.callback_refused("dingtalk", refused.cause)
        return refused.status, {"error": refused.message}
    if not bot.api_secret:
        logger.warning("dingtalk callback for app %s refused: the bot has no api_secret", client_id)
        metrics.callback_refused("dingtalk", "no_api_secret")
        return 401, {"error": "this app has no api_secret; HTTP callbacks cannot be verified"}
    timestamp = headers.get(callbacks.TIMESTAMP_HEADER)
    signature = headers.get(callbacks.SIGNATURE_HEADER)
    if timestamp is None or signature is None or not callbacks.verify_signature(
        timestamp, signature, bot.api_secret, max_skew=settings.ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS,
    ):
        logger.warning("dingtalk callback for app %s rejected: missing, wrong or stale signature", client_id)
        metrics.callback_refused("dingtalk", "verification")
        return 401, {"error": "missing, wrong or stale x-ddpaas-signature"}
    try:
        return 200, card_callback(bot, raw_body, effect=effect, receipt=callbacks.replay_key(timestamp, signature))
    except callbacks.ReplayedCallback:
        logger.warning("dingtalk callback for app %s rejected: its signature pair was already used", client_id)
        metrics.callback_refused("dingtalk", "replayed")
        return 401, {"error": "this x-ddpaas-signature-timestamp / x-ddpaas-signature pair was already used"}
    except callbacks.MalformedCallback as exc:
        logger.warning("dingtalk callback for app %s malformed: %s", client_id, exc)
        metrics.callback_refused("dingtalk", "malformed")
        return 400, {"error": str(exc)}


def card_callback(bot: Bot, payload: Any, *, effect: Effect, receipt: str = "") -> dict[str, Any]:
    """One card callback verified by its transport (the HTTP signature or the Stream connection):
    the body to answer with, rendered from the committed state after the effect's transaction (no
    lock held while rendering; the card PUTs follow from the worker's card-sync lane). Raises
    MalformedCallback for an unreadable payload, ReplayedCallback for a used ``receipt``."""
    outcome = effect(bot=bot, click=callbacks.parse_callback(payload), receipt=receipt)
    return callback_response(outcome)


def stream_callback(bot_pk: int, data: str, *, effect: Effect) -> dict[str, Any]:
    """A Stream frame's card callback, on a worker thread (the ORM never runs on the event loop):
    the Stream ``response``. A malformed frame is answered with ``{}`` and changes nothing."""
    close_old_connections()
    try:
        bot = Bot.objects.get(pk=bot_pk)
        try:
            return card_callback(bot, data, effect=effect)
        except callbacks.MalformedCallback as exc:
            logger.warning("dingtalk stream callback for app %s malformed: %s", bot.app_id, exc)
            return {}
    finally:
        close_old_connections()
