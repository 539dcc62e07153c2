"""One wake path per process: a registry from key to what is parked on it here, fed by this
process's own publishes and by ONE bus subscription (``askcards.wake.bus``, on scale-out).

A key names what a waiter waits for: an ask (its long-polls, MCP calls and task-result waits), an
agent (its events long-poll), a web user (their panel sockets), a parked ``tools/call`` (its cancel
notification). A member of the registry is anything with a ``loop`` and a ``deliver(message)`` run
on that loop: a ``Waiter`` (one parked request) or a panel socket. A publish fans out in memory to
this process's members at once, whatever Redis does, and goes to the bus for the other processes.

Messages carry ids; whoever is woken re-reads the database (the source of truth), so a lost or
duplicated message costs latency, never correctness. While the bus is down (Redis stopped or
restarted), waiters re-read every ``LAYER_RETRY_SECONDS``, and once more when it is back.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections import deque
from typing import Any, Protocol

from asgiref.sync import SyncToAsync
from django.conf import settings

from askcards.wake.common import LAYER_RETRY_SECONDS, REREAD, running_loop

__all__ = ["HUB", "INBOX_LIMIT", "LAYER_RETRY_SECONDS", "REREAD", "Hub", "Member", "Waiter", "unique_name"]

logger = logging.getLogger(__name__)

# A waiter's messages not yet taken; past it the oldest are dropped. A long-poll reads one per wake
# and every wake means "read again", so a full inbox loses nothing a reader would not see at its
# next read.
INBOX_LIMIT = 1000


class Member(Protocol):
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop ``deliver`` runs on; None: in whichever thread publishes."""

    def deliver(self, message: dict[str, Any]) -> None:
        """Take ``message``; called on ``loop``, never raises."""


class Hub:
    """The process's registry (``HUB``). Safe to publish to from any thread; members register
    from their own event loop."""

    def __init__(self) -> None:
        self.origin = secrets.token_hex(8)  # names this process on the bus (its own messages are skipped)
        self._lock = threading.Lock()
        self._members: dict[str, set[Member]] = {}
        self._bus: Any = None
        self._bus_url: str | None = None

    # ------------------------------------------------------------------------------ the bus

    @property
    def bus(self) -> Any:
        """The Redis bus when ``REDIS_URL`` is set (``askcards.wake.bus.RedisBus``), else None: on the
        embedded default every waiter is in this one process."""
        url = settings.REDIS_URL
        if url != self._bus_url:
            from askcards.wake.bus import RedisBus

            if self._bus is not None and hasattr(self._bus, "close"):
                self._bus.close()
            self._bus, self._bus_url = (RedisBus(self, url) if url else None), url
        return self._bus

    @property
    def bus_up(self) -> bool:
        """Whether messages from other processes reach this one now."""
        bus = self.bus
        return bus is None or bool(bus.up)

    # ---------------------------------------------------------------------------- registry

    async def register(self, key: str, member: Member) -> None:
        """``member`` gets the messages published to ``key`` from now on: on return the bus
        subscription is in place too (or the bus is down, and the member re-reads meanwhile)."""
        with self._lock:
            members = self._members.get(key)
            first = members is None
            if members is None:
                members = self._members[key] = set()
            members.add(member)
        bus = self.bus
        if bus is not None:
            await bus.watch(key, first=first)

    def unregister(self, key: str, member: Member) -> None:
        """The member is no longer interested in ``key``; the key's entry goes with its last member."""
        with self._lock:
            members = self._members.get(key)
            if members is None:
                return
            members.discard(member)
            if members:
                return
            del self._members[key]
        bus = self.bus
        if bus is not None:
            bus.unwatch(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._members)

    def count(self, key: str | None = None) -> int:
        """Members of ``key`` (of every key when None): what tests and metrics look at."""
        with self._lock:
            if key is not None:
                return len(self._members.get(key, ()))
            return sum(len(members) for members in self._members.values())

    # ---------------------------------------------------------------------------- delivery

    def publish(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """Send each (key, message), from sync or async code, usually after a commit. Never raises.

        Inside the server (code run by sync_to_async from its event loop) the work is handed to
        that loop without waiting: the thread doing database work is not stalled on it. Elsewhere
        (standalone worker, management commands) the process's own members are handed their
        messages and the bus gets them before this returns."""
        if not messages:
            return
        if running_loop() is None:
            loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
            if loop is not None and loop.is_running():
                loop.call_soon_threadsafe(self._publish_here, messages)
                return
        self._publish_here(messages)

    def _publish_here(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        try:
            for key, message in messages:
                self.fan_out(key, message)
            bus = self.bus
            if bus is not None:
                bus.publish(messages)
        except Exception:  # a wake is a hint: its readers notice at their next read
            logger.warning("publishing %d message(s) failed", len(messages), exc_info=True)

    def fan_out(self, key: str, message: dict[str, Any]) -> None:
        """Hand ``message`` to this process's members of ``key`` (from any thread)."""
        with self._lock:
            members = list(self._members.get(key, ()))
        if members:
            self._hand(members, message, key)

    def broadcast(self, message: dict[str, Any]) -> None:
        """Hand ``message`` to every member once (a ``REREAD`` when the bus was lost or is back)."""
        with self._lock:
            members = {member for group in self._members.values() for member in group}
        self._hand(list(members), message, None)

    def _hand(self, members: list[Member], message: dict[str, Any], key: str | None) -> None:
        here = running_loop()
        for member in members:
            if member.loop is here or member.loop is None:
                member.deliver(message)
                continue
            try:
                member.loop.call_soon_threadsafe(member.deliver, message)
            except RuntimeError:  # its loop is closed: a member left behind by a loop that is gone
                if key is not None:
                    self.unregister(key, member)


HUB = Hub()


def unique_name(prefix: str) -> str:
    """A name no other socket of any process has (a panel socket's presence row is keyed by it)."""
    return f"{prefix}.{HUB.origin}!{secrets.token_hex(8)}"


class Waiter:
    """One parked request (a REST long-poll, an MCP call or task-result wait): registered under
    its keys, its messages queued until it takes them, so none that arrives before it starts
    waiting is lost. Use as ``async with Waiter("long-poll") as waiter: await waiter.add(key)``.

    While the bus is down ``receive`` hands out ``{"type": REREAD}`` every ``LAYER_RETRY_SECONDS``
    (messages of this process still arrive at once), and the hub hands every waiter one when the
    bus is lost and when it is back: the caller re-reads the database, which covers any message
    lost meanwhile."""

    __slots__ = ("what", "hub", "keys", "loop", "_inbox", "_woken")

    def __init__(self, what: str, hub: Hub | None = None):
        self.what = what  # who waits, as the log names it ("long-poll", "MCP call")
        self.hub = hub or HUB
        self.keys: list[str] = []
        self.loop = asyncio.get_running_loop()
        # Made with the first message: a parked waiter, which has none yet, holds no deque.
        self._inbox: deque[dict[str, Any]] | None = None
        self._woken: asyncio.Future[None] | None = None

    async def __aenter__(self) -> Waiter:
        return self

    async def add(self, key: str) -> None:
        self.keys.append(key)
        await self.hub.register(key, self)

    def deliver(self, message: dict[str, Any]) -> None:
        if self._inbox is None:
            self._inbox = deque(maxlen=INBOX_LIMIT)
        self._inbox.append(message)
        self._wake()

    def _wake(self, *_: object) -> None:
        if self._woken is not None and not self._woken.done():
            self._woken.set_result(None)

    async def receive(self, timeout: float, stop: asyncio.Future[Any] | None = None) -> dict[str, Any] | None:
        """The next message (or a ``REREAD``), or None after ``timeout`` seconds or once ``stop``
        is done.

        It waits on one future, set by a message, ``stop`` or a timer: no ``asyncio.wait`` (its
        coroutine, set and callbacks) held by every parked request."""
        if not self._inbox:
            pause = timeout if self.hub.bus_up else min(timeout, LAYER_RETRY_SECONDS)
            self._woken = self.loop.create_future()
            timer = self.loop.call_later(max(0.0, pause), self._wake)
            if stop is not None:
                stop.add_done_callback(self._wake)
            try:
                await self._woken
            finally:
                timer.cancel()
                if stop is not None:
                    stop.remove_done_callback(self._wake)
                self._woken = None
            if not self._inbox:
                if (stop is not None and stop.done()) or pause >= timeout:
                    return None
                return {"type": REREAD}
        assert self._inbox is not None
        return self._inbox.popleft()

    def close(self) -> None:
        for key in self.keys:
            self.hub.unregister(key, self)
        self.keys = []

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()  # synchronous: a request cancelled as its client left still leaves the registry
