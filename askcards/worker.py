"""The background loop run by ``askcards_worker`` and inside ``serve``.

Each step is a plain function that returns how much work it found, so tests call steps directly
and several workers can run at once: every step claims rows with a conditional update (plus
``SKIP LOCKED`` on PostgreSQL), so nothing fires or is delivered twice.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from . import outbox, services, surfaces
from .surfaces import web

logger = logging.getLogger(__name__)

HOUSEKEEPING_EVERY = timedelta(minutes=1)  # answer purge, callback receipts, audit, outbox and ask pruning, stale panels
# After a pass that pushed cards, the card-sync lane waits this long before the next: a burst of
# clicks (each marking another card) is then pushed in batches, each pass's fixed queries shared
# by many pushes, instead of a pass per click. The person who clicked already has the new card
# (the callback's response); this delays only the copies elsewhere, and a card's own pushes are
# paced at 200 ms anyway (surfaces.sync.CARD_PUSH_INTERVAL).
CARD_SYNC_GATHER_SECONDS = 0.1


def settle(report: surfaces.SyncReport) -> None:
    """Turn what a card-sync pass reported into the lifecycle's service calls."""
    for card_id, error in report.unsent_progress_cards:
        services.card_delivery_failed(card_id=card_id, error=error)


class Worker:
    """Duties in independent lanes, so a slow platform or webhook never delays a deadline.

    ``step()`` runs every lane once, in order (tests, ``askcards_worker --once``); the loops run
    each lane on its own thread (standalone worker) or task (inside ``serve``).
    """

    def __init__(self) -> None:
        self._last_housekeeping: datetime | None = None
        # Where each prune walk resumes on the next pass (services.retention).
        self._prune_after: dict[str, Any] = {"audit": None, "outbox": None, "receipts": None, "asks": None}
        self.lanes = (self.deadlines, self.deliveries, self.card_sync, self.housekeeping)

    # Each lane: one pass, returns the work it found. Connections are closed after every pass.
    def deadlines(self) -> int:
        return services.expire_due(now=timezone.now())

    def deliveries(self) -> int:
        undeliverable: list[str] = []
        tried = outbox.deliver_due(now=timezone.now(), undeliverable=undeliverable)
        for ask_id in undeliverable:
            services.ask_result_undeliverable(ask_id=ask_id)
        return tried

    def card_sync(self) -> int:
        report = surfaces.SyncReport()
        done = surfaces.sync_due(timezone.now(), report)
        settle(report)
        return done

    def housekeeping(self) -> int:
        now = timezone.now()
        if self._last_housekeeping is not None and now - self._last_housekeeping < HOUSEKEEPING_EVERY:
            return 0
        self._last_housekeeping = now
        done = services.purge_answers(now=now) + web.presence_purge_stale()
        for kind, prune in (
            ("audit", services.audit_prune), ("outbox", services.outbox_prune), ("receipts", services.receipts_prune),
            ("asks", services.asks_prune),
        ):
            report = prune(now=now, after=self._prune_after[kind])
            self._prune_after[kind] = report.resume_after
            if report.deleted:
                logger.info("pruned %d %s rows in %d batches", report.deleted, kind, report.batches)
            done += report.deleted
        return done

    def _pass(self, lane) -> int:
        close_old_connections()
        try:
            return lane()
        finally:
            connections.close_all()

    def step(self) -> int:
        """One pass over every lane; returns the amount of work done."""
        return sum(self._pass(lane) for lane in self.lanes)

    def pause_after(self, lane, busy: int) -> float:
        """Seconds a lane waits before its next pass: the tick when it found nothing, none when it
        did (more may be waiting), but card sync gathers for a moment (CARD_SYNC_GATHER_SECONDS)."""
        if not busy:
            return settings.ASKCARDS_WORKER_TICK_SECONDS
        return CARD_SYNC_GATHER_SECONDS if lane == self.card_sync else 0.0

    def _loop(self, lane, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                busy = self._pass(lane)
            except Exception:
                logger.exception("worker lane %s failed; retrying", lane.__name__)
                busy = 0
            pause = self.pause_after(lane, busy)
            if pause:
                stop.wait(pause)

    def run_forever(self, stop: threading.Event) -> None:
        """Blocking loop for the standalone worker process: one thread per lane."""
        logger.info("askcards worker started")
        threads = [
            threading.Thread(target=self._loop, args=(lane, stop), name=f"askcards-{lane.__name__}", daemon=True)
            for lane in self.lanes
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        logger.info("askcards worker stopped")

    async def run_async(self) -> None:
        """The same lanes as tasks on a running event loop (``serve``): passes run in the thread
        pool, and wake-ups they send go through the server's own (possibly in-memory) channel layer."""
        logger.info("askcards worker started inside the server")
        await asyncio.gather(*(self._lane_async(lane) for lane in self.lanes))

    async def _lane_async(self, lane) -> None:
        while True:
            try:
                busy = await sync_to_async(self._pass, thread_sensitive=False)(lane)
            except Exception:
                logger.exception("worker lane %s failed; retrying", lane.__name__)
                busy = 0
            pause = self.pause_after(lane, busy)
            if pause:
                await asyncio.sleep(pause)
