"""A channel layer that can go down like Redis does, for in-process tests of parked requests.

``install(monkeypatch)`` makes it the default layer (what ``askcards.events`` and every parked
request use). ``down()``: every call raises ``ConnectionError`` and receives already waiting fail,
as channels_redis does when Redis stops; ``up()``: it answers again, empty (groups forgotten, as
with a restarted Redis). It counts the receives that failed under a waiter.
"""
from __future__ import annotations

import asyncio

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers

from askcards.layers import ThrottledInMemoryChannelLayer


class FlakyLayer(ThrottledInMemoryChannelLayer):
    def __init__(self) -> None:
        super().__init__(capacity=1000)
        self.is_down = False
        self.failed_receives = 0
        self._outages: set[asyncio.Future] = set()

    def down(self) -> None:
        self.is_down = True
        self.channels, self.groups = {}, {}
        for outage in self._outages:
            if not outage.done():
                outage.set_result(None)

    def up(self) -> None:
        self.is_down = False

    @property
    def waiting_receives(self) -> int:
        """Receives pending now (what ``down()`` makes fail)."""
        return len(self._outages)

    def _check(self) -> None:
        if self.is_down:
            raise ConnectionError("channel layer down")

    async def group_add(self, group, channel):
        self._check()
        return await super().group_add(group, channel)

    async def group_discard(self, group, channel):
        self._check()
        return await super().group_discard(group, channel)

    async def group_send(self, group, message):
        self._check()
        return await super().group_send(group, message)

    async def send(self, channel, message):
        self._check()
        return await super().send(channel, message)

    async def receive(self, channel):
        self._check()
        outage = asyncio.get_running_loop().create_future()
        self._outages.add(outage)
        message = asyncio.ensure_future(super().receive(channel))
        try:
            done, _ = await asyncio.wait({message, outage}, return_when=asyncio.FIRST_COMPLETED)
            if message in done:
                return message.result()
            message.cancel()
            self.failed_receives += 1
            raise ConnectionError("channel layer lost")
        finally:
            self._outages.discard(outage)
            if not message.done():
                message.cancel()


def install(monkeypatch) -> FlakyLayer:
    layer = FlakyLayer()
    monkeypatch.setitem(channel_layers.backends, DEFAULT_CHANNEL_LAYER, layer)
    return layer
