import json

from django.core.management.base import BaseCommand, CommandError

from askcards import services
from askcards.errors import InvalidInput
from askcards.models import Agent


class Command(BaseCommand):
    help = "Manage API agents: create one (its key is printed once), rotate a key, list them."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create an agent and print its key once")
        create.add_argument("name")
        create.add_argument("--webhook-url", default="", help="Where events are POSTed (Standard Webhooks)")
        create.add_argument("--json", action="store_true", help='Print {"name","key","webhook_secret"}')
        rotate = sub.add_parser("rotate", help="Replace an agent's key and print the new one")
        rotate.add_argument("name")
        rotate.add_argument("--json", action="store_true")
        sub.add_parser("list", help="List agents")

    def handle(self, *args, action: str, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except InvalidInput as exc:
            raise CommandError(exc.message) from None

    def _create(self, *, name: str, webhook_url: str, json: bool, **_):
        agent, key = services.agent_create(name=name, webhook_url=webhook_url)
        self._print_key(agent, key, json)

    def _rotate(self, *, name: str, json: bool, **_):
        agent = Agent.objects.filter(name=name).first()
        if agent is None:
            raise CommandError(f"no agent named {name!r}")
        self._print_key(agent, services.agent_rotate_key(agent=agent), json)

    def _print_key(self, agent: Agent, key: str, as_json: bool) -> None:
        if as_json:
            payload = {"name": agent.name, "key": key, "webhook_secret": agent.webhook_secret or None}
            self.stdout.write(json.dumps(payload))
            return
        self.stdout.write(f"Agent {agent.name!r}. Its key (shown once, keep it safe):\n{key}")
        if agent.webhook_secret:
            self.stdout.write(f"Webhook signing secret:\n{agent.webhook_secret}")

    def _list(self, **_):
        for agent in Agent.objects.order_by("name"):
            state = "active" if agent.is_active else "inactive"
            self.stdout.write(f"{agent.name}\t{agent.key_hint}…\t{state}\t{agent.webhook_url or '-'}")
