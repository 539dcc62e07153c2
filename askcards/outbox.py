"""What agents must learn: appended inside the transition's transaction, read from /events,
pushed by Standard Webhooks with retries. A row stays until the agent has it."""
from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from askcards import crypto
from askcards.wake import events
from askcards.http import netguard
from .db import statements
from .models import Agent, Ask, OutboxEvent, Session
from .selectors import event_data

logger = logging.getLogger(__name__)

# Seconds after each failed attempt; the last step repeats until the retry window closes.
BACKOFF = (5, 15, 60, 300, 900, 1800, 3600)
CLAIM_SECONDS = 60


def append(
    *,
    agent_id: int,
    type: str,
    ask: Ask | None = None,
    session: Session | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Add an event for the agent. Caller is inside the transition's transaction.

    The sequence number is bumped on the agent row, whose lock is held until commit, so events of
    one agent commit in sequence order and a reader never skips one that commits later. Callers
    append last, just before commit: every other change to the agent's asks waits for that lock.
    """
    statements.outbox_event_insert(
        agent_id=agent_id, type=type, ask=ask, session=session, data=data or {}, next_attempt_at=timezone.now()
    )
    transaction.on_commit(lambda: events.wake(events.agent_key(agent_id)))


def acknowledge(*, agent: Agent, upto: int, delivered: list[str] | None = None) -> int:
    """The agent acknowledged every event up to ``upto`` (``POST /events/ack``). The ids of the
    asks whose results that handed over are appended to ``delivered``."""
    now = timezone.now()
    with transaction.atomic():
        asks = list(
            OutboxEvent.objects.filter(
                agent=agent, seq__lte=upto, delivered_at__isnull=True, type=OutboxEvent.Type.ASK_CLOSED
            ).values_list("ask_id", flat=True)
        )
        count = OutboxEvent.objects.filter(agent=agent, seq__lte=upto, delivered_at__isnull=True).update(
            delivered_at=now, delivered_via="feed", claimed_until=None
        )
        mark_results_delivered(asks, now)
    if delivered is not None:
        delivered.extend(asks)
    return count


def result_returned(ask_id: str, now) -> None:
    """An API response just handed this terminal ask's result to its agent: the result counts as
    delivered (retention clock) and its ask.closed event needs no webhook. The feed still lists it."""
    with transaction.atomic():
        OutboxEvent.objects.filter(ask_id=ask_id, type=OutboxEvent.Type.ASK_CLOSED, delivered_at__isnull=True).update(
            delivered_at=now, delivered_via="response", claimed_until=None
        )
        mark_results_delivered([ask_id], now)


def mark_results_delivered(ask_ids: list[str], now) -> None:
    if ask_ids:
        Ask.objects.filter(id__in=ask_ids, result_delivered_at__isnull=True).update(result_delivered_at=now)


def _claim_due(now, limit: int) -> list[int]:
    """Claim due webhook deliveries; a claimed row is invisible to other workers until it lapses."""
    due = (
        OutboxEvent.objects.filter(delivered_at__isnull=True, failed_at__isnull=True, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("next_attempt_at")
    )
    claimed = []
    with transaction.atomic():
        if transaction.get_connection().features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        for event_id in due.values_list("id", flat=True)[:limit]:
            # Conditional claim: on databases without SKIP LOCKED this is what stops a double claim.
            if (
                OutboxEvent.objects.filter(pk=event_id, delivered_at__isnull=True)
                .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
                .update(claimed_until=now + timedelta(seconds=CLAIM_SECONDS))
            ):
                claimed.append(event_id)
    return claimed


def deliver_due(*, now=None, limit: int = 20, undeliverable: list[str] | None = None,
                delivered: list[str] | None = None) -> int:
    """One worker step: POST due events to their agents' webhooks. Returns how many were tried.

    The ids of asks whose ask.closed event was given up on (the retry window closed) are appended
    to ``undeliverable``, those whose ask.closed event reached the webhook to ``delivered``: the
    caller (the worker) tells their surfaces through the services."""
    now = now or timezone.now()
    claimed = _claim_due(now, limit)
    held_until = now + timedelta(seconds=CLAIM_SECONDS)  # what _claim_due stored: our claim token
    for event_id in claimed:
        # A batch can outlast its claim (20 POSTs of up to the webhook timeout each): renew the
        # claim right before each POST, and skip the event if another worker has claimed it since.
        if _renew_claim(event_id, held_until):
            deliver_one(event_id, undeliverable=undeliverable, delivered=delivered)
    return len(claimed)


def _renew_claim(event_id: int, held_until) -> bool:
    return bool(
        OutboxEvent.objects.filter(pk=event_id, claimed_until=held_until, delivered_at__isnull=True).update(
            claimed_until=timezone.now() + timedelta(seconds=CLAIM_SECONDS)
        )
    )


def deliver_one(event_id: int, *, undeliverable: list[str] | None = None, delivered: list[str] | None = None) -> bool:
    event = (
        OutboxEvent.objects.select_related("agent", "ask__session", "session")
        .prefetch_related("ask__respondents")
        .get(pk=event_id)
    )
    agent = event.agent
    if event.delivered_at is not None:
        return True
    if not agent.webhook_url:
        OutboxEvent.objects.filter(pk=event.pk).update(next_attempt_at=None, claimed_until=None)
        return False
    body = json.dumps(event_data(event), ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": event.webhook_id,
        "webhook-timestamp": str(timestamp),
        "user-agent": "askcards-webhook/1",
    }
    if agent.webhook_secret:
        headers["webhook-signature"] = crypto.webhook_signature(agent.webhook_secret, event.webhook_id, timestamp, body)
    error = ""
    try:
        status = netguard.post(
            agent.webhook_url,
            body=body,
            headers=headers,
            allow_private=settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE,
            connect_timeout=settings.ASKCARDS_WEBHOOK_CONNECT_TIMEOUT_SECONDS,
            read_timeout=settings.ASKCARDS_WEBHOOK_READ_TIMEOUT_SECONDS,
        )
        if 200 <= status < 300:
            now = timezone.now()
            OutboxEvent.objects.filter(pk=event.pk, delivered_at__isnull=True).update(
                delivered_at=now, delivered_via="webhook", claimed_until=None, attempts=F("attempts") + 1, last_error=""
            )
            if event.type == OutboxEvent.Type.ASK_CLOSED and event.ask_id:
                mark_results_delivered([event.ask_id], now)
                if delivered is not None:
                    delivered.append(event.ask_id)
            logger.info("webhook delivered agent=%s seq=%s type=%s", agent.pk, event.seq, event.type)
            return True
        # A redirect would re-send the signed body somewhere the operator did not configure.
        error = f"HTTP {status} (redirects are not followed)" if 300 <= status < 400 else f"HTTP {status}"
    except netguard.Refused as exc:
        error = f"refused: {exc}"
    except requests.RequestException as exc:
        error = type(exc).__name__
    if _schedule_retry(event, error) and event.type == OutboxEvent.Type.ASK_CLOSED and event.ask_id:
        if undeliverable is not None:
            undeliverable.append(event.ask_id)
    return False


def _schedule_retry(event: OutboxEvent, error: str) -> bool:
    """Retry later, or give up once the retry window closes (True)."""
    now = timezone.now()
    attempts = event.attempts + 1
    delay = BACKOFF[min(attempts - 1, len(BACKOFF) - 1)]
    give_up = now + timedelta(seconds=delay) > event.created_at + timedelta(hours=settings.ASKCARDS_WEBHOOK_RETRY_HOURS)
    OutboxEvent.objects.filter(pk=event.pk).update(
        attempts=attempts,
        last_error=error,
        claimed_until=None,
        next_attempt_at=None if give_up else now + timedelta(seconds=delay),
        failed_at=now if give_up else None,
    )
    logger.warning(
        "webhook failed agent=%s seq=%s attempt=%s error=%s%s",
        event.agent_id,
        event.seq,
        attempts,
        error,
        " (giving up; still readable from /events)" if give_up else "",
    )
    return give_up


def retry_now(event_ids: list[int]) -> int:
    """Operator action: make failed or waiting deliveries due at once."""
    return OutboxEvent.objects.filter(pk__in=event_ids, delivered_at__isnull=True).update(
        next_attempt_at=timezone.now(), failed_at=None, claimed_until=None
    )
