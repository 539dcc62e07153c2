"""Prune a PostgreSQL database's old audit rows and outbox events while asks keep ending.

    DATABASE_URL=postgres://… DJANGO_SETTINGS_MODULE=project.settings \\
        .venv/bin/python -m tests.services.pg_prune [--transitions 40] [--batch 2000]

One thread runs housekeeping's prune passes (``services.audit_prune`` then ``outbox_prune``,
resuming where each pass stopped) until nothing old is left; meanwhile the main thread ends
pending asks one at a time with ``services.ask_cancel`` (the same transition core as an answer:
conditional UPDATE, audit row, outbox event with the agent's sequence bump, one transaction),
``--transitions`` of them, or fewer if the pruning finishes first. Prints one JSON document: rows
deleted, batches, the pruning's wall time and its slowest batch, and how long each transition
took and whether it overlapped the pruning (tests/scale/test_retention_at_size.py and
tests/bench/README.md read it). Needs a seeded database (``tests.bench.seed``).
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import timedelta
from typing import Any

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transitions", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    django.setup()
    from django.conf import settings
    from django.db import connections
    from django.db.models import Max
    from django.utils import timezone

    from askcards import services
    from askcards.models import Ask, AskEvent, OutboxEvent

    settings.ASKCARDS_PRUNE_BATCH = args.batch
    settings.ASKCARDS_PRUNE_BATCHES_PER_PASS = 10
    before = {"audit": AskEvent.objects.aggregate(n=Max("pk"))["n"], "outbox": OutboxEvent.objects.aggregate(n=Max("pk"))["n"]}
    prune: dict[str, Any] = {"deleted": {"audit": 0, "outbox": 0}, "batches": 0, "passes": [], "error": None}
    done = threading.Event()

    def pruning() -> None:
        cursors: dict[str, int | None] = {"audit": None, "outbox": None}
        try:
            while True:
                found = 0
                for kind, step in (("audit", services.audit_prune), ("outbox", services.outbox_prune)):
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
        transitions.append({"seconds": finished - started, "ended": ended, "during_prune": not done.is_set()})
    thread.join(timeout=600)
    prune_seconds = time.perf_counter() - prune_started if done.is_set() else None
    slowest = max((p["seconds"] / max(p["batches"], 1) for p in prune["passes"] if p["batches"]), default=0.0)
    print(json.dumps({
        "deleted": prune["deleted"], "batches": prune["batches"], "prune_seconds": prune_seconds,
        "slowest_pass_seconds_per_batch": slowest, "error": prune["error"], "transitions": transitions,
        "ids_before": before,
        "left": {
            "old_audit_of_closed": AskEvent.objects.filter(
                created_at__lt=timezone.now() - timedelta(days=settings.ASKCARDS_AUDIT_RETENTION_DAYS),
                ask__closed_at__lt=timezone.now() - timedelta(days=settings.ASKCARDS_AUDIT_RETENTION_DAYS),
            ).count(),
            "undelivered_events": OutboxEvent.objects.filter(delivered_at__isnull=True, failed_at__isnull=True).count(),
        },
    }))


if __name__ == "__main__":
    main()
