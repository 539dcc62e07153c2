"""Receive DingTalk card callbacks over Stream mode (no public URL needed)."""
from __future__ import annotations

import asyncio
import logging
import signal

from asgiref.sync import sync_to_async
from django.core.management.base import BaseCommand, CommandError

from askcards import services
from askcards.models import Bot
from askcards.surfaces.dingtalk import handler as dingtalk_handler
from askcards.surfaces.dingtalk.stream import StreamClient

logger = logging.getLogger(__name__)


def handle_sync(bot_pk: int, data: str) -> dict:
    """A frame's card callback, on a worker thread: DingTalk's handler with the click's service."""
    return dingtalk_handler.stream_callback(bot_pk, data, effect=services.dingtalk_callback)


def client_for(bot: Bot, **options) -> StreamClient:
    async def handler(data: str) -> dict:
        return await sync_to_async(handle_sync, thread_sensitive=False)(bot.pk, data)

    return StreamClient(client_id=bot.app_id, client_secret=bot.app_secret, base_url=bot.base_url, handler=handler,
                        **options)


class Command(BaseCommand):
    help = (
        "Keep DingTalk Stream connections for card callbacks: every active DingTalk bot whose callback "
        "mode is stream, or the one named by --client-id. Runs until SIGINT/SIGTERM; run one or more."
    )

    def add_arguments(self, parser):
        parser.add_argument("--client-id", help="Only this bot (any callback mode)")
        parser.add_argument("--watchdog", type=float, default=300.0,
                            help="Reconnect when no frame arrived for this many seconds (default 300)")

    def handle(self, *args, client_id: str | None = None, watchdog: float = 300.0, **options):
        bots = Bot.objects.filter(platform=Bot.Platform.DINGTALK, is_active=True)
        bots = bots.filter(app_id=client_id) if client_id else bots.filter(callback_mode=Bot.CallbackMode.STREAM)
        clients = [client_for(bot, watchdog_seconds=watchdog) for bot in bots]
        if not clients:
            raise CommandError("no active DingTalk bot in stream mode (askcards_bot add dingtalk --callback stream …)")
        self.stdout.write(f"Stream mode for {', '.join(client.client_id for client in clients)}.")
        asyncio.run(self._run(clients))
        self.stdout.write("Stopped.")

    async def _run(self, clients: list[StreamClient]) -> None:
        loop = asyncio.get_running_loop()
        tasks = [asyncio.create_task(client.run_forever()) for client in clients]
        for name in ("SIGINT", "SIGTERM"):
            try:
                loop.add_signal_handler(getattr(signal, name), lambda: [task.cancel() for task in tasks])
            except (NotImplementedError, RuntimeError):  # not the main thread (tests) or no signals
                pass
        await asyncio.gather(*tasks, return_exceptions=True)
