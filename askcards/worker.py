"""The background loop run by ``askcards_worker`` and inside ``serve``.

Each step is a plain function that returns how much work it found, so tests call steps directly
and several workers can run at once: every step claims rows with a conditional update (plus
``SKIP LOCKED`` on PostgreSQL), so nothing fires or is delivered twice.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from . import outbox, services, surfaces

logger = logging.getLogger(__name__)

PURGE_EVERY = timedelta(minutes=1)


class Worker:
    def __init__(self) -> None:
        self._last_purge = None

    def step(self) -> int:
        """One pass over every duty; returns the amount of work done."""
        close_old_connections()
        try:
            now = timezone.now()
            done = services.expire_due(now=now)
            done += outbox.deliver_due(now=now)
            done += surfaces.sync_due(now)
            if self._last_purge is None or now - self._last_purge >= PURGE_EVERY:
                self._last_purge = now
                done += services.purge_answers(now=now)
            return done
        finally:
            connections.close_all()

    def run_forever(self, stop: threading.Event) -> None:
        """Blocking loop for the standalone worker process."""
        logger.info("askcards worker started")
        while not stop.is_set():
            try:
                busy = self.step()
            except Exception:
                logger.exception("worker step failed; retrying")
                busy = 0
            if not busy:
                stop.wait(settings.ASKCARDS_WORKER_TICK_SECONDS)
        logger.info("askcards worker stopped")

    async def run_async(self) -> None:
        """The same loop on a running event loop (``serve``): steps run in the thread pool, and
        wake-ups they send go through the server's own (possibly in-memory) channel layer."""
        logger.info("askcards worker started inside the server")
        while True:
            try:
                busy = await sync_to_async(self.step, thread_sensitive=False)()
            except Exception:
                logger.exception("worker step failed; retrying")
                busy = 0
            if not busy:
                await asyncio.sleep(settings.ASKCARDS_WORKER_TICK_SECONDS)
