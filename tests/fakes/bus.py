"""A bus that can go down like Redis does, for in-process tests of parked requests.

``install(monkeypatch)`` makes it the hub's bus (``askcards.wake.hub.HUB``), as ``REDIS_URL`` would
make Redis. There are no other processes: what this one publishes is recorded (``published``),
or lost while the bus is down (``lost``). ``fail()``: the bus is lost, as when Redis stops (every
waiter is handed a ``REREAD``, as the real bus does); ``recover()``: it is back (another
``REREAD``). Inside ``elsewhere()`` this process's publishes act as another process's: its own
waiters get them only through the bus, so while it is down they are lost.
"""
from __future__ import annotations

import contextlib
from typing import Any

from askcards.wake import hub as hubs


class FakeBus:
    def __init__(self, hub: hubs.Hub):
        self.hub = hub
        self.up = True
        self.published: list[tuple[str, dict[str, Any]]] = []
        self.lost: list[tuple[str, dict[str, Any]]] = []

    @property
    def lost_keys(self) -> set[str]:
        return {key for key, _ in self.lost}

    async def watch(self, key: str, *, first: bool) -> None:
        pass

    def unwatch(self, key: str) -> None:
        pass

    def publish(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        (self.published if self.up else self.lost).extend(messages)

    def from_elsewhere(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """Messages another process published: delivered while the bus is up, else lost."""
        if not self.up:
            self.lost.extend(messages)
            return
        self.published.extend(messages)
        for key, message in messages:
            self.hub.fan_out(key, message)

    @contextlib.contextmanager
    def elsewhere(self):
        self.hub._publish_here = self.from_elsewhere  # type: ignore[method-assign]
        try:
            yield self
        finally:
            del self.hub._publish_here

    def fail(self) -> None:
        self.up = False
        self.hub.broadcast({"type": hubs.REREAD})

    def recover(self) -> None:
        self.up = True
        self.hub.broadcast({"type": hubs.REREAD})


def install(monkeypatch, hub: hubs.Hub | None = None) -> FakeBus:
    from django.conf import settings

    hub = hub or hubs.HUB
    bus = FakeBus(hub)
    monkeypatch.setattr(hub, "_bus", bus)
    monkeypatch.setattr(hub, "_bus_url", settings.REDIS_URL)
    return bus
