"""The seam every place that shows an ask plugs into (web panel, Feishu card, DingTalk card).

A surface module provides one object with:

- ``name`` — stored in ``Ask.surfaces`` and in audit rows.
- ``reachable(session, tool)`` — can this surface show this tool's ask to this session's person now?
  Decides ``no_surface``; must be correct across processes (read the database or Redis).
- ``deliver(ask)`` — called after the ask is reserved and committed, outside any transaction and
  before activation, for platforms that must create a message synchronously (DingTalk
  ``createAndDeliver``). Raise ``DeliveryFailed`` to fail the ask with ``delivery_failed``.
- ``show(ask)`` — after the activation commits: push to panels, schedule a card render.
- ``withdraw(ask)`` — after a terminal transition commits: tell every place still showing the ask.
- ``mark(ask)`` (optional) — inside the transition's transaction (activation and every terminal
  transition): record that a platform message must be re-rendered (bump ``CardMessage.version``),
  so the mark commits with the change it is about — no re-render is lost to a crash between
  commit and an after-commit hook, and no extra write transaction is needed.
- ``sync_due(now)`` (optional) — a worker step: push what changed to platform messages whose
  desired version is ahead of what was pushed (``CardMessage.version > synced_version``), retrying
  what failed. Returns how much work it did.

``show`` and ``withdraw`` run from ``transaction.on_commit`` hooks and must not raise: a surface
that fails logs and leaves retries to the worker's card sync.
Surfaces are listed in ``settings.ASKCARDS_SURFACES`` (dotted paths), in the order they are tried.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from datetime import timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Protocol

import requests
from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from askcards.models import Ask, Session

logger = logging.getLogger(__name__)


class DeliveryFailed(Exception):
    """A surface could not put the ask in front of the person."""


class Surface(Protocol):
    name: str

    def reachable(self, session: Session, tool: str) -> bool: ...

    def deliver(self, ask: Ask) -> None: ...

    def show(self, ask: Ask) -> None: ...

    def withdraw(self, ask: Ask) -> None: ...


@lru_cache(maxsize=None)
def _load(paths: tuple[str, ...]) -> tuple[Surface, ...]:
    return tuple(import_string(path)() for path in paths)


def all_surfaces() -> tuple[Surface, ...]:
    return _load(tuple(settings.ASKCARDS_SURFACES))


def reachable_surfaces(session: Session, tool: str) -> list[Surface]:
    return [surface for surface in all_surfaces() if surface.reachable(session, tool)]


def by_name(names: list[str]) -> list[Surface]:
    return [surface for surface in all_surfaces() if surface.name in names]


def sync_due(now) -> int:
    """Worker step: let every surface that keeps platform messages in sync do its due work."""
    done = 0
    for surface in all_surfaces():
        step = getattr(surface, "sync_due", None)
        if step is None:
            continue
        try:
            done += step(now)
        except Exception:
            logger.exception("card sync of surface %s failed; retrying next tick", surface.name)
    return done


def due_card_messages(now, *, platform: str, limit: int, **kind) -> list[int]:
    """Ids of a platform's card messages whose desired version is ahead of what was pushed and
    whose ``next_sync_at`` (pacing, backoff or another worker's claim) has come, oldest first."""
    from django.db.models import F, Q

    from askcards.models import CardMessage

    due = (
        CardMessage.objects.filter(platform=platform, version__gt=F("synced_version"), **kind)
        .filter(Q(next_sync_at__isnull=True) | Q(next_sync_at__lte=now))
        .order_by("next_sync_at", "id")
        .values_list("pk", flat=True)
    )
    return list(due[:limit])


def http_session(base_url: str) -> requests.Session:
    """The HTTP session a platform client talks to ``base_url`` with.

    Proxies (``HTTPS_PROXY``/``NO_PROXY``) and a CA bundle (``REQUESTS_CA_BUNDLE``) are taken from
    the environment once, here: requests would re-read the whole environment on every call, a tenth
    of a card push's CPU in tests/bench."""
    session = requests.Session()
    session.proxies.update(requests.utils.get_environ_proxies(base_url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    session.trust_env = False
    return session


_thread_clients = threading.local()


def thread_client(bot, make: Callable[[], Any], *variant: Any) -> Any:
    """This thread's platform client of ``bot`` (``make()`` builds it), kept so its HTTP connection
    is reused from one push to the next; a new one once the bot's id, URL or secret change.
    Per thread, because a ``requests.Session`` is not shared across threads."""
    key = (bot.platform, bot.pk, bot.app_id, bot.base_url, hashlib.sha256(bot.app_secret.encode()).hexdigest(), *variant)
    clients = getattr(_thread_clients, "by_bot", None)
    if clients is None:
        clients = _thread_clients.by_bot = {}
    client = clients.get(key)
    if client is None:
        client = clients[key] = make()
    return client


# Card syncs of every platform: pushes of one message one at a time (a claim held this long, more
# than one request's timeouts), at most 5 a second (Feishu's per-message limit; DingTalk allows
# more), failures retried after these delays (by failures in a row).
CARD_CLAIM = timedelta(seconds=30)
CARD_PUSH_INTERVAL = timedelta(milliseconds=200)
CARD_BACKOFF_SECONDS = (1, 2, 5, 10, 30, 60, 120, 300)


def claim_card_message(pk: int, now, **unchanged) -> bool:
    """Take one due card message for ``CARD_CLAIM``: the one conditional UPDATE that keeps a
    message's pushes one at a time across workers. False when it is not due or already held, or
    when a field named in ``unchanged`` no longer has the value the caller read.

    Written as SQL (once per set of ``unchanged`` fields): it runs before every push, and the ORM
    rebuilt its conditions each time, a sixth of a push's CPU in tests/bench."""
    from django.db import connection

    sql = _claim_sql(connection.vendor, tuple(unchanged))
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(sql, [adapt(now + CARD_CLAIM), pk, adapt(now), *unchanged.values()])
        return cursor.rowcount == 1


@lru_cache(maxsize=None)
def _claim_sql(vendor: str, unchanged: tuple[str, ...]) -> str:
    """The claim's statement for this database vendor and these ``unchanged`` fields."""
    from django.db import connection

    from askcards.models import CardMessage

    quote = connection.ops.quote_name
    columns = [CardMessage._meta.get_field(name).column for name in unchanged]
    return (
        f"UPDATE {quote(CardMessage._meta.db_table)} SET next_sync_at = %s WHERE id = %s"
        " AND version > synced_version AND (next_sync_at IS NULL OR next_sync_at <= %s)"
        + "".join(f" AND {quote(column)} = %s" for column in columns)
    )


def card_pushed(pk: int, *, version: int, started, **fields) -> None:
    """The push of ``version`` begun at ``started`` succeeded: the next one may follow the interval."""
    from askcards.models import CardMessage

    CardMessage.objects.filter(pk=pk).update(
        synced_version=version, next_sync_at=started + CARD_PUSH_INTERVAL, sync_attempts=0, last_error="", **fields
    )


def card_push_failed(
    message, error: str, *, version: int, started, gave_up: bool, retry_after: float = 0, backoff: bool = True
) -> None:
    """A push failed. Retry after the backoff, or ``retry_after`` seconds when the platform said
    longer (``backoff=False``: exactly ``retry_after``, a platform's fixed rate window); or, when
    ``gave_up`` (a permanent error), count this state as synced: a later change tries again."""
    from askcards.models import CardMessage

    attempts = message.sync_attempts + 1
    delay = retry_after
    if backoff:
        delay = max(retry_after, CARD_BACKOFF_SECONDS[min(attempts, len(CARD_BACKOFF_SECONDS)) - 1])
    logger.warning(
        "%s card %s push failed (attempt %d, %s): %s",
        message.platform, message.pk, attempts, "giving up on this state" if gave_up else f"retry in {delay}s", error,
    )
    CardMessage.objects.filter(pk=message.pk).update(
        sync_attempts=0 if gave_up else attempts,
        last_error=error[:500],
        next_sync_at=started + (CARD_PUSH_INTERVAL if gave_up else timedelta(seconds=delay)),
        **({"synced_version": version} if gave_up else {}),
    )


def mark_changed(ask: Ask) -> None:
    """Inside the transition's transaction: let the ask's surfaces mark what must be re-rendered."""
    for surface in by_name(ask.surfaces):
        mark = getattr(surface, "mark", None)
        if mark is not None:
            mark(ask)


def run_hook(hook: str, ask: Ask) -> None:
    """Call show/withdraw on every surface the ask is on; one failing surface never stops the rest."""
    for surface in by_name(ask.surfaces):
        try:
            getattr(surface, hook)(ask)
        except Exception:
            logger.exception("surface %s.%s failed for ask %s", surface.name, hook, ask.id)


def result_undeliverable(ask: Ask) -> None:
    """The ask's result could never be delivered to its agent: surfaces that can say so on the
    card (``result_undeliverable``, optional) do."""
    for surface in by_name(ask.surfaces):
        hook = getattr(surface, "result_undeliverable", None)
        if hook is None:
            continue
        try:
            hook(ask)
        except Exception:
            logger.exception("surface %s.result_undeliverable failed for ask %s", surface.name, ask.id)
