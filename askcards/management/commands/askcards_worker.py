import signal
import threading

from django.core.management.base import BaseCommand

from askcards.worker import Worker


class Command(BaseCommand):
    help = "Run the askcards background worker: deadlines, webhook deliveries, card syncs, purges."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Run one pass and exit")

    def handle(self, *args, once: bool = False, **options):
        worker = Worker()
        if once:
            self.stdout.write(f"done: {worker.step()}")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        worker.run_forever(stop)
