import argparse
import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from askcards import services
from askcards.errors import InvalidInput
from askcards.models import Agent

ACTOR = "askcards_agent"  # who granted or revoked, in the log


class Command(BaseCommand):
    help = (
        "Manage API agents: create one (its key is printed once), rotate a key, list them, and "
        "grant or revoke the web users (Django users) whose panel an agent may ask and the bots "
        "(Feishu / DingTalk apps) its sessions may use."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create an agent and print its key once")
        create.add_argument("name")
        create.add_argument("--webhook-url", default="", help="Where events are POSTed (Standard Webhooks)")
        create.add_argument(
            "--grant", action="append", default=[], metavar="USERNAME",
            help="Let the agent ask this Django user on the web panel (repeatable)",
        )
        create.add_argument(
            "--bot", action="append", default=[], metavar="APP_ID",
            help="Let the agent's sessions use this Feishu app id / DingTalk client id (repeatable)",
        )
        rotate = sub.add_parser("rotate", help="Replace an agent's key and print the new one")
        rotate.add_argument("name")
        for parser_ in (create, rotate):
            output = parser_.add_mutually_exclusive_group()
            output.add_argument("--json", action="store_true", help='Print {"name","key","webhook_secret","mcp_url"}')
            output.add_argument("--key-only", action="store_true", help="Print the key alone, e.g. for KEY=$(...)")
        grant = sub.add_parser(
            "grant", help="Let an agent's sessions name a Django user as their web_user, or use a bot (--bot)"
        )
        revoke = sub.add_parser(
            "revoke", help="Withdraw a grant: the agent may no longer ask that web user, or use that bot (--bot)"
        )
        for parser_ in (grant, revoke):
            parser_.add_argument("name")
            parser_.add_argument("username", nargs="?", help="A Django username")
            parser_.add_argument(
                "--bot", action="append", default=[], metavar="APP_ID",
                help="A Feishu app id / DingTalk client id (platform:id when both have it; repeatable)",
            )
        quotas = sub.add_parser(
            "quotas", help="Show an agent's quotas, or set them (a number; 0: no limit; 'default': the deployment's)"
        )
        quotas.add_argument("name")
        for quota in services.QUOTAS:
            quotas.add_argument(f"--{quota.replace('_', '-')}", dest=quota, metavar="N|default", type=_quota_value,
                                default=_UNSET)
        sub.add_parser("list", help="List agents and the web users each is granted")

    def handle(self, *args, action: str, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except InvalidInput as exc:
            raise CommandError(exc.message) from None

    def _create(self, *, name: str, webhook_url: str, grant: list[str], bot: list[str], json: bool, key_only: bool,
                **_):
        if Agent.objects.filter(name=name).exists():
            # Keys are stored hashed and shown once: the way to a usable key again is a new one.
            raise CommandError(
                f"an agent named {name!r} already exists; its key was shown once, when it was created. "
                f"For a new key (the old one stops working): askcards_agent rotate {name}"
                + (" --key-only" if key_only else " --json" if json else "")
            )
        bots = [services.bot_find(ref=ref) for ref in dict.fromkeys(bot)]
        agent, key = services.agent_create(name=name, webhook_url=webhook_url, web_users=grant, bots=bots, actor=ACTOR)
        self._print_key(agent, key, json, key_only)

    def _rotate(self, *, name: str, json: bool, key_only: bool, **_):
        agent = self._agent(name)
        self._print_key(agent, services.agent_rotate_key(agent=agent), json, key_only)

    def _grant(self, *, name: str, username: str | None, bot: list[str], **_):
        agent, bots = self._grant_subject(name, username, bot)
        if username is not None:
            if services.agent_grant(agent=agent, username=username, actor=ACTOR):
                self.stdout.write(f"Agent {agent.name!r} may now ask web user {username!r}.")
            else:
                self.stdout.write(f"Agent {agent.name!r} was already granted web user {username!r}; nothing changed.")
        for one in bots:
            if services.agent_bot_grant(agent=agent, bot=one, actor=ACTOR):
                self.stdout.write(f"Agent {agent.name!r} may now use {one.platform} bot {one.app_id!r}.")
            else:
                self.stdout.write(f"Agent {agent.name!r} was already granted {one.platform} bot {one.app_id!r}; nothing changed.")

    def _revoke(self, *, name: str, username: str | None, bot: list[str], **_):
        agent, bots = self._grant_subject(name, username, bot)
        if username is not None:
            if services.agent_revoke(agent=agent, username=username, actor=ACTOR):
                self.stdout.write(
                    f"Agent {agent.name!r} may no longer ask web user {username!r}; "
                    "its asks already pending there stay answerable."
                )
            else:
                self.stdout.write(f"Agent {agent.name!r} was not granted web user {username!r}; nothing changed.")
        for one in bots:
            if services.agent_bot_revoke(agent=agent, bot=one, actor=ACTOR):
                self.stdout.write(
                    f"Agent {agent.name!r} may no longer use {one.platform} bot {one.app_id!r}; "
                    "its cards already sent stay answerable."
                )
            else:
                self.stdout.write(f"Agent {agent.name!r} was not granted {one.platform} bot {one.app_id!r}; nothing changed.")

    def _grant_subject(self, name: str, username: str | None, bot: list[str]):
        """The agent and the bots a grant or revoke names; every name is checked before anything changes."""
        if username is None and not bot:
            raise CommandError("name a Django username, or a bot with --bot APP_ID (or both)")
        return self._agent(name), [services.bot_find(ref=ref) for ref in dict.fromkeys(bot)]

    def _agent(self, name: str) -> Agent:
        agent = Agent.objects.filter(name=name).first()
        if agent is None:
            raise CommandError(f"no agent named {name!r} (askcards_agent list shows them)")
        return agent

    def _print_key(self, agent: Agent, key: str, as_json: bool, key_only: bool) -> None:
        if key_only:
            self.stdout.write(key)
            return
        mcp_url = mcp_url_template()
        if as_json:
            payload = {"name": agent.name, "key": key, "webhook_secret": agent.webhook_secret or None, "mcp_url": mcp_url}
            self.stdout.write(json.dumps(payload))
            return
        self.stdout.write(f"Agent {agent.name!r}. Its key (shown once, keep it safe):\n{key}")
        if agent.webhook_secret:
            self.stdout.write(f"Webhook signing secret:\n{agent.webhook_secret}")
        self.stdout.write(f"Web users it may ask: {', '.join(self._web_users(agent)) or '-'}")
        self.stdout.write(f"Bots it may use: {', '.join(self._bots(agent)) or '-'}")
        self.stdout.write(
            f"MCP URL ({{session}}: the session's key, URL-encoded):\n{mcp_url}\n"
            f"e.g. claude mcp add --transport http askcards '{mcp_url}' --header 'Authorization: Bearer <key>'"
        )

    def _web_users(self, agent: Agent) -> list[str]:
        return sorted(user.get_username() for user in agent.web_users.all())

    def _bots(self, agent: Agent) -> list[str]:
        return sorted(f"{bot.platform}:{bot.app_id}" for bot in agent.bots.all())

    def _quotas(self, *, name: str, **options):
        agent = self._agent(name)
        changes = {quota: options[quota] for quota in services.QUOTAS if options.get(quota, _UNSET) is not _UNSET}
        services.agent_quotas_set(agent=agent, actor=ACTOR, **changes)
        for quota in services.QUOTAS:
            own = getattr(agent, f"quota_{quota}")
            value = services.quota_limit(agent, quota)
            shown = "no limit" if value == 0 else str(value)
            self.stdout.write(f"{quota.replace('_', '-')}\t{shown}{'' if own is not None else ' (default)'}")

    def _list(self, **_):
        for agent in Agent.objects.order_by("name").prefetch_related("web_users", "bots"):
            state = "active" if agent.is_active else "inactive"
            granted = ",".join(self._web_users(agent)) or "-"
            bots = ",".join(self._bots(agent)) or "-"
            self.stdout.write(f"{agent.name}\t{agent.key_hint}…\t{state}\t{agent.webhook_url or '-'}\t{granted}\t{bots}")


_UNSET = object()  # a quota option not given: unchanged


def _quota_value(text: str) -> int | None:
    if text == "default":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number (0: no limit) or 'default', got {text!r}")
    return int(text)


def mcp_url_template() -> str:
    """Where an MCP client connects: ``ASKCARDS_PUBLIC_URL`` (else the local default) + ``/mcp``;
    ``{session}`` stands for the session's key (more session fields may follow as parameters)."""
    base = settings.ASKCARDS_PUBLIC_URL or f"http://127.0.0.1:{settings.ASKCARDS_PORT}"
    return f"{base}/mcp?session={{session}}"
