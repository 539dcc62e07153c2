import signal
import threading

from django.core import checks
from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS

from askcards.worker import Worker


class Command(BaseCommand):
    help = "Run the askcards background worker: deadlines, webhook deliveries, card syncs, purges."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Run one pass and exit")

    def handle(self, *args, once: bool = False, **options):
        # Stored secrets the key cannot decrypt (askcards.E002) are reported here at start, not
        # first met as failures of card pushes and webhooks; the worker still runs its other duties.
        self.check(databases=[DEFAULT_DB_ALIAS], tags=[checks.Tags.database], fail_level=checks.CRITICAL)
        worker = Worker()
        if once:
            self.stdout.write(f"done: {worker.step()}")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        worker.run_forever(stop)
