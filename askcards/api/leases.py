"""The leases this process's parked waiters hold on their asks (``services.waiters``), kept fresh
together: one batched refresh every ``services.WAITER_REFRESH_SECONDS`` for all of them, not a
statement per waiter.

A waiter holds its ask's lease for as long as it is parked (``with KEEPER.holding(ask_id)``); the
keeper runs as a task on each event loop that has waiters. A process that dies takes its keeper
with it, and its waiters' leases lapse.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import Counter
from typing import Iterator

from askcards import services
from askcards.db import in_pool

logger = logging.getLogger(__name__)


class Keeper:
    def __init__(self) -> None:
        self.held: Counter[str] = Counter()
        self._tasks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @contextlib.contextmanager
    def holding(self, ask_id: str) -> Iterator[None]:
        self._running()
        self.held[ask_id] += 1
        try:
            yield
        finally:
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


KEEPER = Keeper()
