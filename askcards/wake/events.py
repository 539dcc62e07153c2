"""The keys waiters wait on and the small messages published after commits (``askcards.wake.hub``).

Payloads carry ids (and what a reader needs without a query); whoever wakes re-reads the database
(the source of truth), so a lost or duplicated message costs latency, never correctness.
"""
from __future__ import annotations

from typing import Any

from askcards.wake.hub import HUB, LAYER_RETRY_SECONDS, REREAD, Waiter

__all__ = ["WAKE", "REREAD", "LAYER_RETRY_SECONDS", "Waiter", "ask_key", "agent_key", "wake", "publish"]

WAKE = "askcards.wake"  # message type; consumers that care map it to a handler


def ask_key(ask_id: str) -> str:
    return f"ask.{ask_id}"


def agent_key(agent_id: int) -> str:
    return f"agent.{agent_id}"


def wake(*keys: str) -> None:
    """Tell what waits on these keys to re-read. Never raises."""
    publish([(key, {"type": WAKE, "key": key}) for key in keys])


def publish(messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Send each (key, message) to its waiters in every process, from sync or async code, after a
    commit. Never raises (``askcards.wake.hub.Hub.publish``)."""
    HUB.publish(messages)
