"""Card sync shared by the platform surfaces: which card messages are due, the claim that keeps a
message's pushes one at a time across workers, the pacing between pushes and the backoff after
failures. Each platform's ``sync_due`` renders and pushes; this module only keeps the books."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Q

from askcards.operators import metrics
from askcards.db import statements
from askcards.models import CardMessage

logger = logging.getLogger(__name__)


# Card syncs of every platform: pushes of one message one at a time (a claim held this long, more
# than one request's timeouts), at most 5 a second (Feishu's per-message limit; DingTalk allows
# more), failures retried after these delays (by failures in a row).
CARD_CLAIM = timedelta(seconds=30)
CARD_PUSH_INTERVAL = timedelta(milliseconds=200)
CARD_BACKOFF_SECONDS = (1, 2, 5, 10, 30, 60, 120, 300)


def due_card_messages(now: datetime, *, platform: str, limit: int, **kind: Any) -> list[int]:
    """Ids of a platform's card messages whose desired version is ahead of what was pushed and
    whose ``next_sync_at`` (pacing, backoff or another worker's claim) has come, oldest first."""
    due = (
        CardMessage.objects.filter(platform=platform, version__gt=F("synced_version"), **kind)
        .filter(Q(next_sync_at__isnull=True) | Q(next_sync_at__lte=now))
        .order_by("next_sync_at", "id")
        .values_list("pk", flat=True)
    )
    return list(due[:limit])


def claim_card_message(pk: int, now: datetime, **unchanged: Any) -> bool:
    """Take one due card message for ``CARD_CLAIM``: the one conditional UPDATE that keeps a
    message's pushes one at a time across workers. False when it is not due or already held, or
    when a field named in ``unchanged`` no longer has the value the caller read.

    A hand-written statement (``db.statements.card_message_claim``): it runs before every push,
    and the ORM rebuilt its conditions each time, a large share of a push's CPU (bench_statements)."""
    return statements.card_message_claim(pk, until=now + CARD_CLAIM, now=now, **unchanged)


def card_pushed(pk: int, *, version: int, started: datetime, **fields: Any) -> None:
    """The push of ``version`` begun at ``started`` succeeded: the next one may follow the interval."""
    CardMessage.objects.filter(pk=pk).update(
        synced_version=version, next_sync_at=started + CARD_PUSH_INTERVAL, sync_attempts=0, last_error="", **fields
    )


def card_push_failed(
    message: CardMessage,
    error: str,
    *,
    version: int,
    started: datetime,
    gave_up: bool,
    retry_after: float = 0,
    backoff: bool = True,
) -> None:
    """A push failed. Retry after the backoff, or ``retry_after`` seconds when the platform said
    longer (``backoff=False``: exactly ``retry_after``, a platform's fixed rate window); or, when
    ``gave_up`` (a permanent error), count this state as synced: a later change tries again."""
    attempts = message.sync_attempts + 1
    delay = retry_after
    if backoff:
        delay = max(retry_after, CARD_BACKOFF_SECONDS[min(attempts, len(CARD_BACKOFF_SECONDS)) - 1])
    logger.warning(
        "%s card %s push failed (attempt %d, %s): %s",
        message.platform, message.pk, attempts, "giving up on this state" if gave_up else f"retry in {delay}s", error,
    )
    metrics.card_push_failed(message.platform, gave_up=gave_up)
    CardMessage.objects.filter(pk=message.pk).update(
        sync_attempts=0 if gave_up else attempts,
        last_error=error[:500],
        next_sync_at=started + (CARD_PUSH_INTERVAL if gave_up else timedelta(seconds=delay)),
        **({"synced_version": version} if gave_up else {}),
    )
