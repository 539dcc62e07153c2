"""The background loop run by ``askcards_worker`` and inside ``serve``.

Each step is a plain function that returns how much work it found, so tests call steps directly
and several workers can run at once: every step claims rows with a conditional update (plus
``SKIP LOCKED`` on PostgreSQL), so nothing fires or is delivered twice.
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time
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
# Out of file descriptors (EMFILE: the server's sockets took them all), every pass would fail at
# once, each with a traceback: a lane then waits FD_BACKOFF_FIRST seconds, doubling up to
# FD_BACKOFF_MAX, and the worker logs one warning for the shortage and one line when it is over.
FD_BACKOFF_FIRST, FD_BACKOFF_MAX = 1.0, 30.0
# Descriptors a pass may need at once (a SQLite connection opens three files): a pass starts only
# if this many can be opened, so a shortage is met here rather than somewhere inside the pass.
FD_HEADROOM = 4
_FD_ERRNOS = (errno.EMFILE, errno.ENFILE)


def descriptors_short(headroom: int = FD_HEADROOM) -> bool:
    """Whether this process cannot open ``headroom`` more file descriptors right now."""
    opened: list[int] = []
    try:
        for _ in range(headroom):
            opened.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        if exc.errno in _FD_ERRNOS:
            return True
        raise
    finally:
        for fd in opened:
            os.close(fd)
    return False


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether a pass failed for want of file descriptors: EMFILE or ENFILE in the exception or what
    caused it, or (a library that hides the errno: SQLite's "unable to open database file")
    none to spare now."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _FD_ERRNOS:
            return True
        cause = cause.__cause__ or cause.__context__
    return descriptors_short()


class DescriptorShortage:
    """Shared by a worker's lanes: one warning when the process runs out of file descriptors (at
    most one a minute, should it come and go), one line when a pass succeeds again."""

    WARN_EVERY = 60.0  # seconds

    def __init__(self, clock=time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.short = False
        self._warned_at: float | None = None
        self._warned = False  # for the current shortage

    def hit(self, lane: str, exc: BaseException) -> None:
        with self._lock:
            now = self._clock()
            starting, self.short = not self.short, True
            warn = starting and (self._warned_at is None or now - self._warned_at >= self.WARN_EVERY)
            if warn:
                self._warned_at, self._warned = now, True
        if warn:  # the type and errno only: an exception's text may hold a URL with a token in it
            code = errno.errorcode.get(getattr(exc, "errno", None) or 0, "no errno")
            logger.warning("worker: the process is out of file descriptors (lane %s: %s, %s); every lane backs off "
                           "(%.0f s, doubling up to %.0f s) and resumes by itself", lane, type(exc).__name__, code,
                           FD_BACKOFF_FIRST, FD_BACKOFF_MAX)

    def over(self) -> None:
        with self._lock:
            if not self.short:
                return
            warned, self.short, self._warned = self._warned, False, False
        if warned:
            logger.info("worker: file descriptors are available again; lanes resumed")


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
        self.shortage = DescriptorShortage()

    # Each lane: one pass, returns the work it found. Connections are closed after every pass.
    def deadlines(self) -> int:
        now = timezone.now()
        return services.expire_due(now=now) + services.waits_lapsed(now=now)

    def deliveries(self) -> int:
        undeliverable: list[str] = []
        delivered: list[str] = []
        tried = outbox.deliver_due(now=timezone.now(), undeliverable=undeliverable, delivered=delivered)
        for ask_id in undeliverable:
            services.ask_result_undeliverable(ask_id=ask_id)
        if delivered:
            services.ask_results_delivered(ask_ids=delivered)
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
        if descriptors_short():
            raise OSError(errno.EMFILE, "no file descriptors to spare for a pass")
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

    def _failed(self, lane, exc: Exception, short_streak: int) -> tuple[float, int]:
        """After a failed pass: the pause before the next, and the lane's streak of passes failed
        for want of file descriptors (those back off, with one warning for the whole worker)."""
        if out_of_descriptors(exc):
            self.shortage.hit(lane.__name__, exc)
            return min(FD_BACKOFF_MAX, FD_BACKOFF_FIRST * 2**short_streak), short_streak + 1
        logger.error("worker lane %s failed; retrying", lane.__name__, exc_info=exc)
        return self.pause_after(lane, 0), 0

    def _passed(self, lane, busy: int) -> float:
        self.shortage.over()
        return self.pause_after(lane, busy)

    def _loop(self, lane, stop: threading.Event) -> None:
        short_streak = 0
        while not stop.is_set():
            try:
                busy = self._pass(lane)
            except Exception as exc:
                pause, short_streak = self._failed(lane, exc, short_streak)
            else:
                pause, short_streak = self._passed(lane, busy), 0
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
        pool, and the wakes they publish reach this process's waiters in memory (askcards.wake.hub)."""
        logger.info("askcards worker started inside the server")
        await asyncio.gather(*(self._lane_async(lane) for lane in self.lanes))

    async def _lane_async(self, lane) -> None:
        short_streak = 0
        while True:
            try:
                busy = await sync_to_async(self._pass, thread_sensitive=False)(lane)
            except Exception as exc:
                pause, short_streak = self._failed(lane, exc, short_streak)
            else:
                pause, short_streak = self._passed(lane, busy), 0
            if pause:
                await asyncio.sleep(pause)
