"""The leases this process's parked waiters hold on their asks (``services.waiters``), kept fresh
together: one batched refresh every ``services.WAITER_REFRESH_SECONDS`` for all of them, not a
statement per waiter.

A waiter holds its ask's lease for as long as it is parked (``with KEEPER.holding(ask_id)``); the
keeper runs as a task on each event loop that has waiters. A process that dies takes its keeper
with it, and its waiters' leases lapse.
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from collections import Counter

from askcards import services
from askcards.db import in_pool

logger = logging.getLogger(__name__)


class Keeper:
    def __init__(self) -> None:
        self.held: Counter[str] = Counter()
        self._tasks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def holding(self, ask_id: str) -> Holding:
        return Holding(self, ask_id)

    def hold(self, ask_id: str) -> None:
        self._running()
        self.held[ask_id] += 1

    def release(self, ask_id: str) -> None:
        self.held[ask_id] -= 1
        if self.held[ask_id] <= 0:
            del self.held[ask_id]

    def _running(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._tasks.get(loop)
        if task is None or task.done():
            self._tasks[loop] = loop.create_task(self._keep())

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(services.WAITER_REFRESH_SECONDS)
            if not self.held:
                continue
            try:
                await in_pool(services.waiters_alive, ask_ids=list(self.held))
            except Exception:  # the database away for a moment: the next round refreshes them
                logger.exception("could not refresh the leases of %d parked waiters", len(self.held))


class Holding:
    """``with KEEPER.holding(ask_id)``: the lease held for the block. Two slots, not a generator
    with its frame: every parked waiter keeps one for as long as it waits."""

    __slots__ = ("keeper", "ask_id")

    def __init__(self, keeper: Keeper, ask_id: str) -> None:
        self.keeper, self.ask_id = keeper, ask_id

    def __enter__(self) -> None:
        self.keeper.hold(self.ask_id)

    def __exit__(self, *exc_info: object) -> None:
        self.keeper.release(self.ask_id)


KEEPER = Keeper()
