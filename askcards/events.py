"""Channel-layer group names and the small messages sent after commits.

Payloads carry ids (and what a reader needs without a query); whoever wakes re-reads the database
(the source of truth), so a lost or duplicated message costs latency, never correctness.
"""
from __future__ import annotations

import logging

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

WAKE = "askcards.wake"  # message type; consumers that care map it to a handler


def ask_group(ask_id: str) -> str:
    return f"askcards.ask.{ask_id}"


def agent_group(agent_id: int) -> str:
    return f"askcards.agent.{agent_id}"


def channel_layer() -> BaseChannelLayer:
    """The channel layer, for code that waits on groups (long-polls, MCP calls); settings always
    configure one (``CHANNEL_LAYERS``)."""
    layer = get_channel_layer()
    if layer is None:
        raise ImproperlyConfigured("CHANNEL_LAYERS has no default layer: long-polls and MCP calls wait on it")
    return layer


def wake(*groups: str) -> None:
    """Tell long-polls waiting on these groups to re-read. Never raises."""
    send([(group, {"type": WAKE, "group": group}) for group in groups])


def send(messages: list[tuple[str, dict]]) -> None:
    """group_send each (group, message), from sync code, after a commit. Never raises.

    Inside the server (code run by sync_to_async from its event loop) the sends are handed to that
    loop without waiting: the thread doing database work is not stalled on each hop. Elsewhere
    (standalone worker, management commands) they are sent before returning.
    """
    layer = get_channel_layer()
    if layer is None or not messages:
        return
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    if loop is not None and loop.is_running():
        loop.call_soon_threadsafe(lambda: loop.create_task(_send_all(layer, messages)))
    else:
        async_to_sync(_send_all)(layer, messages)


async def _send_all(layer, messages: list[tuple[str, dict]]) -> None:
    for group, message in messages:
        try:
            await layer.group_send(group, message)
        except Exception:
            logger.warning("message to %s failed; its readers will notice at their timeout", group, exc_info=True)
