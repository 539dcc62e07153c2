"""Who waits on an ask in person, and what happens when they stop: a lease on the ask.

Two kinds of waiter hold one (``Ask.waiter_until``): an agent host waiting on its prompt
(``askcards.hosts``) and an MCP client's blocking ``tools/call``. While a waiter is parked its
process keeps the lease fresh (one batched refresh for all of its waiters,
``askcards.api.leases``). When the waiter goes:

- a host's request closes: the ask is withdrawn at once (``services.host_left``); a process that
  died with its waiters stops refreshing, and the lease lapses within ``WAITER_LEASE``;
- an MCP client's stream closes: the lease runs on for the grace period
  (``ASKCARDS_MCP_CALLER_GRACE_SECONDS``), in which a re-call with the same ``call_id`` (it parks
  again) or a ``tasks/get`` / ``tasks/result`` of the ask takes it back.

A lapsed lease is swept by the worker (``waits_lapsed``): the ask is cancelled, ``host_gone`` for
a host's prompt and ``caller_gone`` for an MCP call, which withdraws it from every card and panel
with words saying so — nobody answers into a void. Asks read later by design (REST, tasks, the
events feed, a webhook) hold no lease.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Iterable

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from askcards.models import Ask, AskEvent

from .asks import ask_cancel, claim_open

logger = logging.getLogger(__name__)

WAITER_LEASE = timedelta(seconds=90)  # how long a parked waiter's lease runs without a refresh
WAITER_REFRESH_SECONDS = 30  # how often a process refreshes the leases of its parked waiters
REFRESH_BATCH = 500


def caller_grace() -> timedelta:
    return timedelta(seconds=getattr(settings, "ASKCARDS_MCP_CALLER_GRACE_SECONDS", 60))


def waiter_parked(*, ask_id: str) -> None:
    """A waiter parks on this open ask (a host's prompt as it is made, an MCP call as it parks or
    parks again): its lease runs ``WAITER_LEASE`` from now."""
    Ask.objects.filter(pk=ask_id, status__in=Ask.OPEN).update(waiter_until=timezone.now() + WAITER_LEASE)


def waiters_alive(*, ask_ids: Iterable[str]) -> None:
    """A process's parked waiters are all still there: their leases run ``WAITER_LEASE`` from now
    (one statement per ``REFRESH_BATCH`` asks)."""
    ids = sorted(set(ask_ids))
    until = timezone.now() + WAITER_LEASE
    for start in range(0, len(ids), REFRESH_BATCH):
        Ask.objects.filter(pk__in=ids[start:start + REFRESH_BATCH], status__in=Ask.OPEN,
                           waiter_until__isnull=False).update(waiter_until=until)


def caller_left(*, ask_id: str, parked: bool = True) -> None:
    """An MCP client's blocking call went away (its stream closed): the lease runs the grace period
    from now, for the client to come back for it. ``parked=False``: it went away while its ask was
    being made, before it parked and took the lease; the lease starts here."""
    asks = Ask.objects.filter(pk=ask_id, status__in=Ask.OPEN)
    if parked:
        asks = asks.filter(waiter_until__isnull=False)
    asks.update(waiter_until=timezone.now() + caller_grace())


def caller_polled(*, ask: Ask) -> None:
    """The client read a leased ask as a task (``tasks/get``, ``tasks/result``): it is still there,
    so the lease runs at least the grace period from now."""
    if ask.is_open and ask.waiter_until is not None:
        until = timezone.now() + caller_grace()
        Ask.objects.filter(pk=ask.pk, status__in=Ask.OPEN, waiter_until__lt=until).update(waiter_until=until)


def waits_lapsed(*, now: datetime | None = None, limit: int = 200) -> int:
    """Worker step: withdraw the open asks whose waiter is gone (their lease lapsed): ``host_gone``
    for a host's prompt, ``caller_gone`` for an MCP call."""
    now = now or timezone.now()
    host = AskEvent.objects.filter(ask=OuterRef("pk"), kind=AskEvent.Kind.CREATED, detail__has_key="host")
    lapsed = (Ask.objects.filter(status__in=Ask.OPEN, waiter_until__lt=now).select_related("session", "agent")
              .annotate(of_host=Exists(host)))
    withdrawn = 0
    for ask in lapsed.order_by("waiter_until")[:limit]:
        reason = Ask.Reason.HOST_GONE if ask.of_host else Ask.Reason.CALLER_GONE
        with transaction.atomic():
            if claim_open(ask) and ask_cancel(ask=ask, reason=reason, actor="system"):
                logger.info("ask %s withdrawn: its %s is gone (lease lapsed)", ask.id,
                            "host's waiter" if ask.of_host else "MCP client")
                withdrawn += 1
    return withdrawn
