import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from askcards import services
from askcards.errors import InvalidInput
from askcards.models import Bot


class Command(BaseCommand):
    help = "Manage Feishu / DingTalk bots. Secrets are encrypted at rest and never printed."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="Add a bot")
        platforms = add.add_subparsers(dest="platform", required=True)
        feishu = platforms.add_parser("feishu", help="A Feishu / Lark app")
        feishu.add_argument("--app-id", required=True)
        feishu.add_argument("--app-secret", required=True)
        feishu.add_argument("--verification-token", default="")
        feishu.add_argument("--encrypt-key", default="")
        feishu.add_argument("--base-url", default="", help="https://open.feishu.cn (default) or https://open.larksuite.com")
        feishu.add_argument("--name", default="")
        feishu.add_argument("--json", action="store_true")
        dingtalk = platforms.add_parser("dingtalk", help="A DingTalk app (robot)")
        dingtalk.add_argument("--client-id", required=True, help="The robotCode / AppKey")
        dingtalk.add_argument("--client-secret", required=True)
        dingtalk.add_argument("--api-secret", default="", help="Signs HTTP card callbacks")
        dingtalk.add_argument("--template-id", default="")
        dingtalk.add_argument("--callback", choices=["http", "stream"], default="http")
        dingtalk.add_argument("--base-url", default="")
        dingtalk.add_argument("--name", default="")
        dingtalk.add_argument("--json", action="store_true")
        listing = sub.add_parser("list", help="List bots (no secrets)")
        listing.add_argument("--json", action="store_true")

    def handle(self, *args, action: str, **options):
        if action == "list":
            return self._list(options["json"])
        platform = options["platform"]
        try:
            if platform == "feishu":
                bot = services.bot_add(
                    platform=platform,
                    app_id=options["app_id"],
                    app_secret=options["app_secret"],
                    base_url=options["base_url"],
                    verification_token=options["verification_token"],
                    encrypt_key=options["encrypt_key"],
                    name=options["name"],
                )
            else:
                bot = services.bot_add(
                    platform=platform,
                    app_id=options["client_id"],
                    app_secret=options["client_secret"],
                    base_url=options["base_url"],
                    api_secret=options["api_secret"],
                    template_id=options["template_id"],
                    callback_mode=options["callback"],
                    name=options["name"],
                )
        except InvalidInput as exc:
            raise CommandError(exc.message) from None
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        if options["json"]:
            self.stdout.write(json.dumps(_public(bot)))
        else:
            self.stdout.write(f"Added {bot.platform} bot {bot.app_id} ({bot.base_url}).")

    def _list(self, as_json: bool) -> None:
        bots = [_public(bot) for bot in Bot.objects.order_by("platform", "app_id")]
        if as_json:
            self.stdout.write(json.dumps(bots))
            return
        for bot in bots:
            secrets = ",".join(name for name, present in bot["secrets"].items() if present) or "-"
            self.stdout.write(f"{bot['platform']}\t{bot['app_id']}\t{bot['base_url']}\tsecrets set: {secrets}")


def _public(bot: Bot) -> dict:
    """What may be shown of a bot: ids and whether each secret is set, never the secrets."""
    return {
        "platform": bot.platform,
        "app_id": bot.app_id,
        "name": bot.name,
        "base_url": bot.base_url,
        "template_id": bot.template_id,
        "callback_mode": bot.callback_mode,
        "active": bot.is_active,
        "secrets": {
            "app_secret": bool(bot.app_secret),
            "verification_token": bool(bot.verification_token),
            "encrypt_key": bool(bot.encrypt_key),
            "api_secret": bool(bot.api_secret),
        },
    }
