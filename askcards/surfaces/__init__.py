"""Where asks are shown: loading the configured surfaces and calling their hooks.

Each surface subclasses ``base.Surface`` (web panel, Feishu card, DingTalk card); ``http`` holds
what the platform clients share, ``sync`` the card-sync bookkeeping. The lifecycle core calls the
functions below, which call one hook on every surface concerned:

- ``reachable_surfaces`` — which surfaces can show a new ask (none: ``no_surface``), companions included;
- ``mark_changed`` — inside an activation's or terminal transition's transaction;
- ``run_hook("show" | "withdraw")`` — after that transaction commits;
- ``sync_due`` — the worker's card-sync lane;
- ``result_undeliverable`` — the ask's result never reached its agent.

``for_platform`` gives the surface of a bot's platform (its ``client``, for services that talk to
the platform outside an ask, as ``bot_test`` does).
"""
from __future__ import annotations

import logging
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils.module_loading import import_string

from .base import DeliveryFailed, PlatformClient, Surface, SyncReport

if TYPE_CHECKING:
    from askcards.models import Ask, Session

__all__ = [
    "DeliveryFailed", "PlatformClient", "Surface", "all_surfaces", "by_name", "for_platform", "mark_changed",
    "reachable_surfaces",
    "result_undeliverable", "run_hook", "sync_due", "SyncReport",
]

logger = logging.getLogger(__name__)


@lru_cache(maxsize=None)
def _load(paths: tuple[str, ...]) -> tuple[Surface, ...]:
    loaded = tuple(import_string(path)() for path in paths)
    for surface in loaded:
        if not isinstance(surface, Surface):
            raise TypeError(f"{type(surface).__qualname__} (ASKCARDS_SURFACES) must subclass askcards.surfaces.base.Surface")
    return loaded


def all_surfaces() -> tuple[Surface, ...]:
    return _load(tuple(settings.ASKCARDS_SURFACES))


def reachable_surfaces(session: Session, tool: str) -> list[Surface]:
    """The surfaces that can show a new ask, in settings order: those that reach the person now,
    and, when there is one, those that accompany it (``Surface.accompanies``)."""
    reached = [surface for surface in all_surfaces() if surface.reachable(session, tool)]
    if not reached:
        return []
    return [surface for surface in all_surfaces() if surface in reached or surface.accompanies(session, tool)]


# The built-in surface of each platform a bot can belong to: a bot of a platform whose surface
# ASKCARDS_SURFACES leaves out still has a client (its credentials can be tested).
PLATFORM_SURFACES = (
    "askcards.surfaces.feishu.surface.FeishuSurface",
    "askcards.surfaces.dingtalk.surface.DingTalkSurface",
)


def for_platform(platform: str) -> Surface:
    """The surface whose cards go through bots of ``platform`` (a ``Bot.Platform``): the configured
    one (ASKCARDS_SURFACES) when there is one, else the built-in one. LookupError for a platform no
    surface serves."""
    for surface in (*all_surfaces(), *_load(PLATFORM_SURFACES)):
        if surface.platform and surface.platform == platform:
            return surface
    raise LookupError(f"no surface serves platform {platform!r}")


def by_name(names: list[str]) -> list[Surface]:
    return [surface for surface in all_surfaces() if surface.name in names]


def sync_due(now: datetime, report: SyncReport) -> int:
    """Worker step: let every surface do its due card-sync work; one failing never stops the rest.
    What the lifecycle must act on goes into ``report`` (the worker acts on it)."""
    done = 0
    for surface in all_surfaces():
        try:
            done += surface.sync_due(now, report)
        except Exception:
            logger.exception("card sync of surface %s failed; retrying next tick", surface.name)
    return done


def mark_changed(ask: Ask) -> None:
    """Inside the transition's transaction: let the ask's surfaces mark what must be re-rendered.
    Not guarded: a failed mark fails the transition, which then did not happen anywhere."""
    for surface in by_name(ask.surfaces):
        surface.mark(ask)


def run_hook(hook: str, ask: Ask) -> None:
    """After commit, call ``show`` or ``withdraw`` on every surface the ask is on; one failing
    surface never stops the rest."""
    if hook not in ("show", "withdraw"):
        raise ValueError(f"hook must be 'show' or 'withdraw', not {hook!r}")
    for surface in by_name(ask.surfaces):
        try:
            if hook == "show":
                surface.show(ask)
            else:
                surface.withdraw(ask)
        except Exception:
            logger.exception("surface %s.%s failed for ask %s", surface.name, hook, ask.id)


def result_delivered(ask: Ask) -> None:
    """The ask's result reached its agent: surfaces that told the person only "submitted" can now
    say it was delivered."""
    for surface in by_name(ask.surfaces):
        try:
            surface.result_delivered(ask)
        except Exception:
            logger.exception("surface %s.result_delivered failed for ask %s", surface.name, ask.id)


def result_undeliverable(ask: Ask) -> None:
    """The ask's result could never be delivered to its agent: surfaces that can say so on the
    card do."""
    for surface in by_name(ask.surfaces):
        try:
            surface.result_undeliverable(ask)
        except Exception:
            logger.exception("surface %s.result_undeliverable failed for ask %s", surface.name, ask.id)
