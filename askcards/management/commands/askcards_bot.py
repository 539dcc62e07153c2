import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from askcards import services
from askcards.errors import AskcardsError
from askcards.models import Bot

FEISHU_CLEARABLE = ("verification_token", "encrypt_key")
DINGTALK_CLEARABLE = ("api_secret", "template_id")


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

        update = sub.add_parser("update", help="Change a bot's secrets or options (what is not given is kept)")
        platforms = update.add_subparsers(dest="platform", required=True)
        feishu = platforms.add_parser("feishu", help="A Feishu / Lark app")
        feishu.add_argument("app_id")
        feishu.add_argument("--app-secret")
        feishu.add_argument("--verification-token")
        feishu.add_argument("--encrypt-key")
        feishu.add_argument("--base-url")
        feishu.add_argument("--name")
        feishu.add_argument("--clear", action="append", choices=FEISHU_CLEARABLE, default=[],
                            help="Remove a stored value (repeatable)")
        dingtalk = platforms.add_parser("dingtalk", help="A DingTalk app (robot)")
        dingtalk.add_argument("client_id", help="The robotCode / AppKey")
        dingtalk.add_argument("--client-secret")
        dingtalk.add_argument("--api-secret", help="Signs HTTP card callbacks")
        dingtalk.add_argument("--template-id")
        dingtalk.add_argument("--callback", choices=["http", "stream"])
        dingtalk.add_argument("--base-url")
        dingtalk.add_argument("--name")
        dingtalk.add_argument("--clear", action="append", choices=DINGTALK_CLEARABLE, default=[],
                              help="Remove a stored value (repeatable)")
        for parser_ in (feishu, dingtalk):
            state = parser_.add_mutually_exclusive_group()
            state.add_argument("--active", dest="is_active", action="store_true", default=None,
                               help="Take callbacks and send cards again")
            state.add_argument("--inactive", dest="is_active", action="store_false",
                               help="Refuse its callbacks and send no cards")
            parser_.add_argument("--json", action="store_true")

        remove = sub.add_parser(
            "remove", help="Delete a bot; one that sessions or cards refer to is retired (kept inactive) instead"
        )
        remove.add_argument("platform", choices=Bot.Platform.values)
        remove.add_argument("app_id", help="Feishu app id / DingTalk client id")
        remove.add_argument("--json", action="store_true")

        test = sub.add_parser("test", help="Ask the platform for an access token with the bot's credentials")
        test.add_argument("platform", choices=Bot.Platform.values)
        test.add_argument("app_id", help="Feishu app id / DingTalk client id")
        test.add_argument("--timeout", type=float, default=5.0, help="Seconds to wait for the platform (default 5)")
        test.add_argument("--json", action="store_true")

    def handle(self, *args, action: str, **options):
        try:
            if action == "list":
                return self._list(options["json"])
            if action == "add":
                return self._add(options)
            if action == "update":
                return self._update(options)
            if action == "remove":
                return self._remove(options)
            return self._test(options)
        except AskcardsError as exc:
            raise CommandError(exc.message) from None
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None

    def _add(self, options) -> None:
        platform = options["platform"]
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
        self._done(bot, f"Added {bot.platform} bot {bot.app_id} ({bot.base_url}).", options["json"])

    def _update(self, options) -> None:
        platform = options["platform"]
        if platform == "feishu":
            bot = services.bot_get(platform=platform, app_id=options["app_id"])
            changes = {
                "app_secret": options["app_secret"], "verification_token": options["verification_token"],
                "encrypt_key": options["encrypt_key"],
            }
        else:
            bot = services.bot_get(platform=platform, app_id=options["client_id"])
            changes = {
                "app_secret": options["client_secret"], "api_secret": options["api_secret"],
                "template_id": options["template_id"], "callback_mode": options["callback"],
            }
        changes.update(base_url=options["base_url"], name=options["name"], is_active=options["is_active"])
        for name in options["clear"]:
            if changes.get(name) is not None:
                raise CommandError(f"--clear {name} and a new value for it were both given")
            changes[name] = ""
        changed = services.bot_update(bot=bot, **changes)
        text = (f"Updated {bot.platform} bot {bot.app_id}: {', '.join(sorted(changed))}." if changed
                else f"{bot.platform} bot {bot.app_id} already had these values; nothing changed.")
        self._done(bot, text, options["json"], changed=sorted(changed))

    def _remove(self, options) -> None:
        bot = services.bot_get(platform=options["platform"], app_id=options["app_id"])
        removal = services.bot_remove(bot=bot)
        if options["json"]:
            self.stdout.write(json.dumps({
                "platform": bot.platform, "app_id": bot.app_id, "removed": removal.deleted,
                "retired": not removal.deleted, "sessions": removal.sessions, "pending_asks": removal.pending_asks,
            }))
        elif removal.deleted:
            self.stdout.write(f"Removed {bot.platform} bot {bot.app_id}.")
        else:
            self.stdout.write(
                f"Retired {bot.platform} bot {bot.app_id}: {removal.sessions} session(s) refer to it, so it is kept, "
                f"inactive — its callbacks are refused and no card is sent through it. {removal.pending_asks} "
                f"pending ask(s) on it stay pending until they end (cancel them in the admin if nobody will "
                f"answer). Undo with: askcards_bot update {bot.platform} {bot.app_id} --active"
            )

    def _test(self, options) -> None:
        bot = services.bot_get(platform=options["platform"], app_id=options["app_id"])
        if options["timeout"] <= 0:
            raise CommandError("--timeout must be a positive number of seconds")
        check = services.bot_test(bot=bot, timeout=options["timeout"])
        if options["json"]:
            self.stdout.write(json.dumps({
                "platform": bot.platform, "app_id": bot.app_id, "ok": check.ok, "cause": check.cause,
                "http_status": check.http_status, "message": check.message, "warnings": check.warnings,
            }))
        else:
            for warning in check.warnings:
                self.stderr.write(f"Warning: {warning}")
            if check.ok:
                self.stdout.write(f"OK: {check.message}")
        if not check.ok:
            raise CommandError(f"FAILED ({check.cause}): {check.message}")

    def _done(self, bot: Bot, text: str, as_json: bool, **extra) -> None:
        warnings = services.bot_warnings(bot)
        if as_json:
            self.stdout.write(json.dumps({**_public(bot), **extra, "warnings": warnings}))
            return
        self.stdout.write(text)
        for warning in warnings:
            self.stderr.write(f"Warning: {warning}")

    def _list(self, as_json: bool) -> None:
        bots = [_public(bot) for bot in Bot.objects.order_by("platform", "app_id")]
        if as_json:
            self.stdout.write(json.dumps(bots))
            return
        for bot in bots:
            secrets = ",".join(name for name, present in bot["secrets"].items() if present) or "-"
            state = "" if bot["active"] else "\tinactive"
            self.stdout.write(f"{bot['platform']}\t{bot['app_id']}\t{bot['base_url']}\tsecrets set: {secrets}{state}")


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
