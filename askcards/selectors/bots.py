"""The active bots by platform and app id, cached per process for platform callbacks."""
from __future__ import annotations

import logging
import time
from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from .. import crypto
from ..errors import BotSecretsUnreadable, CallbackRefused
from ..models import Bot
from .rows import unique_row


# Platform callbacks name their bot by app id, many times a second, and bots change rarely: each
# process keeps the active bots it has read (secrets decrypted) for BOT_CACHE_SECONDS. A change
# saved in this process (admin, askcards_bot) clears the cache at once; other processes see it
# within BOT_CACHE_SECONDS. Unknown ids are not cached (a flood of made-up ids stays a 404 query).
BOT_CACHE_SECONDS = 10.0
_clock = time.monotonic  # the cache's clock (tests move it forward)
_active_bots: dict[tuple[str, str], tuple[float, Bot]] = {}
_unreadable_logged: set[tuple[str, str]] = set()
logger = logging.getLogger(__name__)


def callback_bot(*, platform: str, app_id: str) -> Bot:
    """The active bot a platform callback's URL names; CallbackRefused otherwise (404 for an
    unknown or inactive app, 503 when its secrets cannot be read)."""
    try:
        bot = active_bot(platform=platform, app_id=app_id)
    except BotSecretsUnreadable as exc:
        raise CallbackRefused(str(exc), status=exc.status, cause="secrets_unreadable") from None
    if bot is None:
        raise CallbackRefused("unknown app", status=404, cause="unknown_app")
    return bot


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
