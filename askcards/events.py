"""Channel-layer group names and the small wake-up messages sent after commits.

Payloads carry ids only; whoever wakes re-reads the database (the source of truth), so a lost or
duplicated wake costs latency, never correctness.
"""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

WAKE = "askcards.wake"  # message type; consumers that care map it to a handler


def ask_group(ask_id: str) -> str:
    return f"askcards.ask.{ask_id}"


def agent_group(agent_id: int) -> str:
    return f"askcards.agent.{agent_id}"


def wake(*groups: str) -> None:
    """Tell long-polls (and panels) waiting on these groups to re-read. Never raises."""
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        try:
            async_to_sync(layer.group_send)(group, {"type": WAKE, "group": group})
        except Exception:
            logger.warning("wake of %s failed; waiters will notice at their timeout", group, exc_info=True)
