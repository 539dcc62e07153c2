"""Prune a PostgreSQL database's old audit rows, outbox events and callback receipts while asks
keep ending and callbacks keep arriving.

    DATABASE_URL=postgres://… DJANGO_SETTINGS_MODULE=project.settings \\
        .venv/bin/python -m tests.services.pg_prune [--transitions 40] [--batch 2000] [--receipts 0]

``--receipts N`` first adds N callback receipts over the last two days, oldest first, half of
them past ``CALLBACK_RECEIPT_TTL`` (none within an hour of it). One thread then runs housekeeping's prune
passes (``services.audit_prune``, ``outbox_prune``, ``receipts_prune``, each resuming where its
last pass stopped) until nothing old is left; meanwhile the main thread ends pending asks one at a
time with ``services.ask_cancel`` (the same transition core as an answer: conditional UPDATE,
audit row, outbox event with the agent's sequence bump, one transaction), each followed by a new
callback receipt (``services.callback_receipt``, as a click records), ``--transitions`` of them,
or fewer if the pruning finishes first. Prints one JSON document: rows deleted, batches, the
pruning's wall time and its slowest batch, and how long each transition and receipt took and
whether it overlapped the pruning (tests/scale/test_retention_at_size.py and docs/performance.md
read it). Needs a seeded database (``tests.bench.seed``).
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transitions", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--receipts", type=int, default=0)
    args = parser.parse_args()
    django.setup()
    from django.conf import settings
    from django.db import connections
    from django.db.models import Max
    from django.utils import timezone

    from askcards import services
    from askcards.models import Ask, AskEvent, CallbackReceipt, OutboxEvent

    settings.ASKCARDS_PRUNE_BATCH = args.batch
    settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 10
    seeded_at = timezone.now()
    receipt_cutoff = seeded_at - services.CALLBACK_RECEIPT_TTL
    # Oldest first, evenly: the first half in the day before the cutoff's hour, the second half in
    # the day after it (none within an hour of it, so the prune's own cutoff splits them alike).
    half, day = args.receipts // 2, timedelta(hours=23)

    def received(n: int) -> datetime:
        if n < half:
            return receipt_cutoff - timedelta(hours=24) + day * (n + 1) / (half + 1)
        return receipt_cutoff + timedelta(hours=1) + day * (n - half + 1) / (args.receipts - half + 1)

    for start in range(0, args.receipts, 5000):
        CallbackReceipt.objects.bulk_create(
            CallbackReceipt(platform="feishu", event_id=f"ev-seeded-{n}", created_at=received(n))
            for n in range(start, min(start + 5000, args.receipts))
        )
    steps = (("audit", services.audit_prune), ("outbox", services.outbox_prune), ("receipts", services.receipts_prune))
    before = {"audit": AskEvent.objects.aggregate(n=Max("pk"))["n"], "outbox": OutboxEvent.objects.aggregate(n=Max("pk"))["n"]}
    receipts_before = {"all": CallbackReceipt.objects.count(),
                       "old": CallbackReceipt.objects.filter(created_at__lt=receipt_cutoff).count()}
    prune: dict[str, Any] = {"deleted": {kind: 0 for kind, _ in steps}, "batches": 0, "passes": [], "error": None}
    done = threading.Event()

    def pruning() -> None:
        cursors: dict[str, int | None] = {kind: None for kind, _ in steps}
        try:
            while True:
                found = 0
                for kind, step in steps:
                    started = time.perf_counter()
                    report = step(now=timezone.now(), after=cursors[kind])
                    took = time.perf_counter() - started
                    cursors[kind] = report.resume_after
                    prune["deleted"][kind] += report.deleted
                    prune["batches"] += report.batches
                    prune["passes"].append({"kind": kind, "deleted": report.deleted, "batches": report.batches,
                                            "seconds": took})
                    found += report.deleted
                if not found and all(cursor is None for cursor in cursors.values()):
                    return
        except Exception as exc:  # reported, not swallowed: the test fails on it
            prune["error"] = repr(exc)
        finally:
            connections.close_all()
            done.set()

    pending = list(Ask.objects.filter(status=Ask.Status.PENDING).order_by("created_at")[: args.transitions])
    thread = threading.Thread(target=pruning, name="prune")
    prune_started = time.perf_counter()
    thread.start()
    transitions = []
    for ask in pending:
        if done.is_set():
            break
        started = time.perf_counter()
        ended = services.ask_cancel(ask=ask, reason=Ask.Reason.BY_AGENT, actor="agent:scale")
        finished = time.perf_counter()
        recorded = services.callback_receipt(platform="feishu", event_id=f"ev-during-{ask.pk}")
        receipt_seconds = time.perf_counter() - finished
        transitions.append({"seconds": finished - started, "ended": ended, "receipt_seconds": receipt_seconds,
                            "recorded": recorded, "during_prune": not done.is_set()})
    thread.join(timeout=600)
    prune_seconds = time.perf_counter() - prune_started if done.is_set() else None
    slowest = max((p["seconds"] / max(p["batches"], 1) for p in prune["passes"] if p["batches"]), default=0.0)
    print(json.dumps({
        "deleted": prune["deleted"], "batches": prune["batches"], "prune_seconds": prune_seconds,
        "slowest_pass_seconds_per_batch": slowest, "error": prune["error"], "transitions": transitions,
        "ids_before": before, "receipts_before": receipts_before,
        "left": {
            "old_audit_of_closed": AskEvent.objects.filter(
                created_at__lt=timezone.now() - timedelta(days=settings.ASKCARDS_AUDIT_RETENTION_DAYS),
                ask__closed_at__lt=timezone.now() - timedelta(days=settings.ASKCARDS_AUDIT_RETENTION_DAYS),
            ).count(),
            "undelivered_events": OutboxEvent.objects.filter(delivered_at__isnull=True, failed_at__isnull=True).count(),
            "old_receipts": CallbackReceipt.objects.filter(created_at__lt=receipt_cutoff).count(),
            "receipts": CallbackReceipt.objects.count(),
        },
    }))


if __name__ == "__main__":
    main()
