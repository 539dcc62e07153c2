"""Register a DingTalk app's HTTP card-callback route (``/v1.0/card/callbacks/register``)."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from askcards.models import Bot
from askcards.surfaces.dingtalk import surface as dingtalk
from askcards.surfaces.dingtalk.client import DingTalkError


class Command(BaseCommand):
    help = (
        "Point a DingTalk app's card callbacks at askcards: registers the route askcards-<client id> "
        "with the callback URL and the bot's api_secret. Without --force an existing registration is kept."
    )

    def add_arguments(self, parser):
        parser.add_argument("--client-id", required=True, help="The bot's client id (robotCode / AppKey)")
        parser.add_argument("--url", required=True, help="https://<host>/callbacks/dingtalk/<client id>/")
        parser.add_argument("--force", action="store_true", help="Overwrite an existing registration of the route")

    def handle(self, *args, client_id: str, url: str, force: bool, **options):
        bot = Bot.objects.filter(platform=Bot.Platform.DINGTALK, app_id=client_id).first()
        if bot is None:
            raise CommandError(f"no DingTalk bot {client_id!r}; add it with: manage.py askcards_bot add dingtalk …")
        if not url.startswith(("https://", "http://")) or "?" in url:
            raise CommandError("--url must be an http(s) URL without a query string (DingTalk drops query strings)")
        try:
            registration = dingtalk.register_callback(bot, url, force=force)
        except DingTalkError as exc:
            raise CommandError(str(exc)) from None
        current = registration.callback_url == url and registration.secret_matches is not False
        if current:
            self.stdout.write(
                f"Route {registration.route_key} → {registration.callback_url} (signed with the bot's api_secret)."
            )
            return
        self.stdout.write(
            f"Route {registration.route_key} is already registered to {registration.callback_url}"
            f"{'' if registration.callback_url != url else ' with another api_secret'}; nothing changed. "
            "Run again with --force to overwrite it (cards already sent follow the new registration)."
        )
