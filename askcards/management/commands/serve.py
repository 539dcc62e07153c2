"""The embedded default: one process serving HTTP + WebSocket (daphne) and running the worker."""
from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

logger = logging.getLogger(__name__)


def parse_addrport(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not port.isdigit():
        raise CommandError(f"expected [addr:]port, like 127.0.0.1:8000 or 8000, got {value!r}")
    return (host or "127.0.0.1").strip("[]"), int(port)


class Command(BaseCommand):
    help = "Migrate, then serve HTTP + WebSocket and run the background worker in this one process."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default=f"127.0.0.1:{settings.ASKCARDS_PORT}",
                            help="[addr:]port, default 127.0.0.1:$PORT (PORT unset: 8000)")
        parser.add_argument("--no-migrate", action="store_true", help="Skip applying migrations first")
        parser.add_argument("--no-worker", action="store_true", help="Serve only; run askcards_worker elsewhere")

    def handle(self, *args, addrport: str, no_migrate: bool, no_worker: bool, **options):
        host, port = parse_addrport(addrport)
        if not no_migrate:
            call_command("migrate", interactive=False, verbosity=0)
        # The database checks (stored secrets the key cannot decrypt: askcards.E002) are printed,
        # not fatal: the web panel and the other bots keep working while the operator fixes them.
        self.check(databases=[DEFAULT_DB_ALIAS], tags=[checks.Tags.database], fail_level=checks.CRITICAL)
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from askcards.worker import Worker
        from project.asgi import application

        def ready() -> None:
            if not no_worker:
                asyncio.ensure_future(Worker().run_async())
            self.stdout.write(f"askcards serving on http://{host}:{port}/ (worker: {'off' if no_worker else 'on'})")
            self.stdout.flush()

        Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            ready_callable=ready,
            application_close_timeout=10,
            websocket_handshake_timeout=10,
            verbosity=0,
            server_name="askcards",
        ).run()
