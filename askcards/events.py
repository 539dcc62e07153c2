"""Channel-layer group names and the small messages sent after commits.

Payloads carry ids (and what a reader needs without a query); whoever wakes re-reads the database
(the source of truth), so a lost or duplicated message costs latency, never correctness.
"""
from __future__ import annotations

import asyncio
import logging

import anyio
from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

WAKE = "askcards.wake"  # message type; consumers that care map it to a handler
REREAD = "askcards.reread"  # what Subscription.receive hands out when a message may have been lost
LAYER_RETRY_SECONDS = 1.0  # while the channel layer is down, a parked request re-reads this often


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
        loop.call_soon_threadsafe(lambda: loop.create_task(send_all(layer, messages)))
    else:
        async_to_sync(send_all)(layer, messages)


async def send_all(layer, messages: list[tuple[str, dict]]) -> None:
    """group_send each (group, message) from async code. Never raises: a message the layer refuses
    (Redis down) is logged, and its readers notice at their next re-read or timeout."""
    for group, message in messages:
        try:
            await layer.group_send(group, message)
        except Exception:
            logger.warning("message to %s failed; its readers will notice at their timeout", group, exc_info=True)


class Subscription:
    """One channel on the channel layer, in some groups, for one parked request (a REST long-poll,
    an MCP call): messages that arrive before the request starts waiting are queued, not lost.

    The layer may fail under the wait (Redis stopped or restarted: the groups it held are gone).
    Then ``receive`` hands out ``{"type": REREAD}`` every ``LAYER_RETRY_SECONDS`` while it cannot
    join its groups again, and once more right after it did: the caller re-reads the database,
    which covers any message sent meanwhile, and later messages reach it again."""

    def __init__(self, what: str):
        self.what = what  # who waits, as the log names it ("long-poll", "MCP call")
        self.layer = channel_layer()
        self.channel = ""
        self.groups: list[str] = []
        self._next: asyncio.Future | None = None
        self._lost = False  # the layer failed: the channel is in none of its groups

    async def __aenter__(self) -> Subscription:
        self.channel = await self.layer.new_channel()
        return self

    async def add(self, group: str) -> None:
        """Join ``group`` (later, once the layer answers again, if it is down now)."""
        self.groups.append(group)
        if not self._lost:
            try:
                await self.layer.group_add(group, self.channel)
            except Exception as exc:
                self._lose(exc)

    async def receive(self, timeout: float, stop: asyncio.Future | None = None) -> dict | None:
        """The next message (or a ``REREAD``), or None after ``timeout`` seconds or once ``stop``
        is done (the pending receive is kept for the next call)."""
        if self._lost:
            if await self._rejoin():
                return {"type": REREAD}
            pause = min(max(0.0, timeout), LAYER_RETRY_SECONDS)
            if stop is None:
                await asyncio.sleep(pause)
            else:
                await asyncio.wait({stop}, timeout=pause)
            return None if pause >= timeout or (stop is not None and stop.done()) else {"type": REREAD}
        if self._next is None:
            self._next = asyncio.ensure_future(self.layer.receive(self.channel))
        waiting = {self._next} if stop is None else {self._next, stop}
        done, _ = await asyncio.wait(waiting, timeout=max(0.0, timeout),
                                     return_when=asyncio.FIRST_COMPLETED)
        if self._next not in done:
            return None
        next_, self._next = self._next, None
        error = next_.exception()
        if error is not None:
            self._lose(error)
            return {"type": REREAD}
        return next_.result()

    def _lose(self, exc: BaseException) -> None:
        if not self._lost:  # once per outage: one line a second per waiter would flood the log
            logger.warning("%s lost the channel layer (%s); re-reading every %s s until it is back",
                           self.what, type(exc).__name__, LAYER_RETRY_SECONDS)
        self._lost = True

    async def _rejoin(self) -> bool:
        try:
            for group in self.groups:
                await self.layer.group_add(group, self.channel)
        except Exception as exc:
            logger.debug("%s could not join its groups again (%s)", self.what, type(exc).__name__)
            return False
        self._lost = False
        return True

    async def __aexit__(self, *exc_info) -> None:
        if self._next is not None:
            self._next.cancel()
        if self._lost:
            return  # the layer is down: its groups expire on their own
        # Shielded: a request cancelled as its client left still leaves its groups.
        with anyio.CancelScope(shield=True):
            for group in self.groups:
                try:
                    await self.layer.group_discard(group, self.channel)
                except Exception:
                    logger.debug("group_discard of %s failed", group, exc_info=True)
