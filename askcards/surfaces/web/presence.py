"""Which panels are connected: one row per socket in the database, refreshed by its heartbeat, so
every process agrees (it decides ``no_surface``)."""
from __future__ import annotations

import hashlib

from django.db import transaction
from django.utils import timezone

from askcards import selectors
from askcards.db import statements
from askcards.models import PanelPresence


HEARTBEAT_SECONDS = 30
# How long a push may be under way: a socket's difference from the database is acted on only when
# it is still there this much later (``panels_catch_up``).
PUSH_GRACE_SECONDS = 5


def panel_key(username: str) -> str:
    # Bus channels are named by keys: a short hash, whatever characters the username holds.
    return "panel." + hashlib.sha256(username.encode()).hexdigest()[:32]


def presence_touch(*, username: str, channel_name: str) -> None:
    """The socket is connected now (on connect; ``presence_refresh`` keeps it fresh)."""
    presence_refresh({channel_name: username})


def presence_refresh(sockets: dict[str, str]) -> None:
    """These sockets (channel name → username) are connected now: one UPDATE per
    ``PANEL_BEAT_CHUNK`` of them, and the rows the worker purged as stale while their process was
    stalled made again."""
    now = timezone.now()
    names = list(sockets)
    for start in range(0, len(names), selectors.PANEL_BEAT_CHUNK):
        chunk = names[start:start + selectors.PANEL_BEAT_CHUNK]
        with transaction.atomic():
            statements.commit_without_flush_wait(PanelPresence)
            updated = PanelPresence.objects.filter(channel_name__in=chunk).update(last_seen=now)
        if updated < len(chunk):
            PanelPresence.objects.bulk_create(
                [PanelPresence(channel_name=name, username=sockets[name], last_seen=now) for name in chunk],
                ignore_conflicts=True)


def presence_drop(*, channel_name: str) -> None:
    PanelPresence.objects.filter(channel_name=channel_name).delete()


def is_present(username: str) -> bool:
    return PanelPresence.objects.filter(username=username, last_seen__gte=timezone.now() - PanelPresence.TTL).exists()


def presence_purge_stale() -> int:
    """Drop presence rows no panel refreshed within ``PanelPresence.TTL`` (a crashed process's): the
    worker's housekeeping, once a minute; readers compare ``last_seen`` themselves."""
    return PanelPresence.objects.filter(last_seen__lt=timezone.now() - PanelPresence.TTL).delete()[0]
