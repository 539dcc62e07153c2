"""Per-agent quotas: how much one key may hold open and how fast it may ask.

- **Pending asks in all** and **pending asks per respondent** (a person's panel or chat is never
  flooded with thousands of forms): counted from the database when an ask is about to be made,
  so every process agrees. Two calls racing at the limit may both pass: a quota bounds growth, it
  is not a lifecycle rule.
- **Creation rate**: a token bucket per agent in the database (``AgentRateBucket``), updated with
  a conditional UPDATE, so every process draws from the same bucket.
- **Parked waits** (REST long-polls, blocking MCP calls and ``tasks/result``): counted per process
  in memory. What they cost is each process's memory and file descriptors, so the cap applies in
  each process; a client spread over several processes may park the cap in each.

Each limit is the agent's own (admin, "Quotas") or, when blank, the ``ASKCARDS_QUOTA_*`` setting;
0 is no limit. A refusal is ``QuotaExceeded`` (HTTP 429 with ``Retry-After``), counted on
``/metrics`` (``askcards_quota_refusals_total{quota}``), and changes nothing.
"""
from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from askcards.operators import metrics
from askcards.errors import InvalidInput, QuotaExceeded
from askcards.models import Agent, AgentRateBucket, Ask, Respondent

logger = logging.getLogger(__name__)

# What a refusal's Retry-After says while an agent is at a pending-asks quota: asks end when
# people answer or at their deadlines, which askcards cannot foresee; a minute is a polite pace.
PENDING_RETRY_SECONDS = 60
# ... and at the parked-waits quota: a long-poll ends within a minute.
PARKED_RETRY_SECONDS = 10
BUCKET_ATTEMPTS = 5  # optimistic updates of a contended bucket before the call is refused


QUOTAS = ("pending_asks", "pending_per_respondent", "parked_waits", "asks_per_minute", "ask_burst")


def agent_quotas_set(*, agent: Agent, actor: str, **limits: int | None) -> list[str]:
    """Set the agent's own limits: a number (0 is no limit), or None for the deployment's default.
    Only the quotas given change; returns their names. InvalidInput for an unknown quota or a
    negative number (nothing saved)."""
    unknown = sorted(set(limits) - set(QUOTAS))
    if unknown:
        raise InvalidInput(f"no quota {', '.join(unknown)} (the quotas: {', '.join(QUOTAS)})")
    bad = sorted(name for name, value in limits.items() if value is not None and (not isinstance(value, int) or value < 0))
    if bad:
        raise InvalidInput(f"quota {', '.join(bad)} must be a whole number ≥ 0 (0: no limit), or empty for the default")
    values = {f"quota_{name}": value for name, value in limits.items()}
    for field, value in values.items():
        setattr(agent, field, value)
    if values:
        Agent.objects.filter(pk=agent.pk).update(**values)
        logger.info("agent %s quotas changed by %s: %s", agent.name, actor,
                    ", ".join(f"{name}={'default' if value is None else value}" for name, value in limits.items()))
    return list(limits)


def quota_limit(agent: Agent, quota: str) -> int:
    """The agent's limit for ``quota`` (pending_asks, pending_per_respondent, parked_waits,
    asks_per_minute, ask_burst): its own, else the setting; 0 is no limit."""
    own = getattr(agent, f"quota_{quota}")
    return int(own if own is not None else getattr(settings, f"ASKCARDS_QUOTA_{quota.upper()}"))


def _refuse(agent: Agent, quota: str, message: str, retry_after: float) -> QuotaExceeded:
    metrics.quota_refused(quota)
    return QuotaExceeded(
        f"{message}. An operator can change the agent's quotas on its admin page "
        f"(blank: the ASKCARDS_QUOTA_* default; 0: no limit).",
        quota=quota,
        retry_after=max(1, math.ceil(retry_after)),
    )


def quota_check_ask(*, agent: Agent, respondent_ids: Sequence[str], now: datetime | None = None) -> None:
    """Raise QuotaExceeded unless ``agent`` may make one more ask for ``respondent_ids``; when it
    may, takes one token from its creation-rate bucket. Checks read the agent's open asks (its
    ``(agent, status, …)`` index); nothing is written unless every check passes."""
    per_person = quota_limit(agent, "pending_per_respondent")
    if per_person:
        keys = [rid.casefold() for rid in dict.fromkeys(respondent_ids)]
        counts = dict(
            Respondent.objects.filter(ask__agent=agent, ask__status__in=Ask.OPEN, respondent_key__in=keys)
            .order_by().values_list("respondent_key").annotate(n=Count("pk"))
        )
        full = next((rid for rid in dict.fromkeys(respondent_ids) if counts.get(rid.casefold(), 0) >= per_person), None)
        if full is not None:
            raise _refuse(agent, "pending_per_respondent",
                          f"agent {agent.name!r} already has {per_person} open asks for {full[:80]!r}, its quota of "
                          "pending asks per person; wait until some are answered or end, or cancel some",
                          PENDING_RETRY_SECONDS)
    in_all = quota_limit(agent, "pending_asks")
    if in_all and Ask.objects.filter(agent=agent, status__in=Ask.OPEN).count() >= in_all:
        raise _refuse(agent, "pending_asks",
                      f"agent {agent.name!r} already has {in_all} open asks, its quota of pending asks; wait until "
                      "some are answered or end, or cancel some", PENDING_RETRY_SECONDS)
    _take_token(agent, now or timezone.now())


def _take_token(agent: Agent, now: datetime) -> None:
    per_minute, burst = quota_limit(agent, "asks_per_minute"), quota_limit(agent, "ask_burst")
    if not per_minute:
        return
    burst = max(1, burst)
    rate = per_minute / 60.0
    for _ in range(BUCKET_ATTEMPTS):
        bucket = AgentRateBucket.objects.filter(agent=agent).values_list("tokens", "updated_at", "version").first()
        if bucket is None:
            try:
                with transaction.atomic():
                    AgentRateBucket.objects.create(agent=agent, tokens=burst - 1, updated_at=now)
                return
            except IntegrityError:  # another process made it first: draw from it
                continue
        tokens, updated_at, version = bucket
        available = min(float(burst), tokens + max(0.0, (now - updated_at).total_seconds()) * rate)
        if available < 1:
            raise _refuse(agent, "asks_per_minute",
                          f"agent {agent.name!r} asks faster than its quota of {per_minute} asks a minute "
                          f"(bursts of {burst}); try again shortly", (1 - available) / rate)
        # The bucket as read: a concurrent call that took a token first makes this match nothing.
        if AgentRateBucket.objects.filter(agent=agent, version=version).update(
            tokens=available - 1, updated_at=max(now, updated_at), version=version + 1
        ):
            return
    raise _refuse(agent, "asks_per_minute",
                  f"agent {agent.name!r} makes too many asks at once (its bucket of {burst} is contended); "
                  "try again shortly", 1)


# ------------------------------------------------------------------------------------ parked waits

_parked: Counter[int] = Counter()  # agent id -> waits parked in this process
_parked_lock = threading.Lock()


def quota_check_parked(*, agent: Agent) -> None:
    """Raise QuotaExceeded when ``agent`` already has its quota of waits parked in this process
    (checked before a wait's work is done: a refused wait changes nothing)."""
    cap = quota_limit(agent, "parked_waits")
    if cap and _parked[agent.pk] >= cap:
        raise _refuse(agent, "parked_waits",
                      f"agent {agent.name!r} already has {cap} waits parked on this server, its quota of parked "
                      "waits (long-polls and blocking MCP calls); let some end first", PARKED_RETRY_SECONDS)


@contextmanager
def parked_wait(agent_id: int) -> Iterator[None]:
    """Count a wait of the agent as parked in this process while the block runs."""
    with _parked_lock:
        _parked[agent_id] += 1
    try:
        yield
    finally:
        with _parked_lock:
            _parked[agent_id] -= 1
            if _parked[agent_id] <= 0:
                del _parked[agent_id]


def parked_count(agent_id: int) -> int:
    return _parked[agent_id]
