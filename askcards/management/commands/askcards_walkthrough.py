"""The README's walkthrough set up in one command, safe to run again: a web user with a password and
an agent allowed to ask them, printed as shell assignments for ``eval "$(manage.py askcards_walkthrough)"``.

It is for trying askcards on one machine. The password and the agent key are kept in the data
directory (``walkthrough.env``, readable by its owner only, next to the database they unlock
anyway), each under the name of its user or agent, so a second run, in this terminal or another,
changes nothing and prints the same working key (a run with ``--user`` / ``--agent`` keeps its own). A saved key that no longer works (the agent's key was rotated) is replaced by a new one. Agents
for real use are made with ``askcards_agent create``: their key is shown once and kept nowhere.
"""
from __future__ import annotations

import os
import secrets
import shlex
import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from askcards import selectors, services
from askcards.errors import InvalidInput, Unauthenticated
from askcards.models import Agent

ACTOR = "askcards_walkthrough"  # who created or granted, in the log
STATE_FILE = "walkthrough.env"


class Command(BaseCommand):
    help = (
        "Set up the README's walkthrough, or print what an earlier run set up: a web user with a password "
        "(a superuser, so /admin/ works too) and an agent granted to ask them. Prints PASSWORD=… and KEY=… "
        "for eval; both are kept in the data directory for the next run."
    )

    def add_arguments(self, parser):
        parser.add_argument("--user", default="alice", help="the web user (a Django user), default alice")
        parser.add_argument("--agent", default="my-agent", help="the agent's name, default my-agent")

    def handle(self, *args, user: str, agent: str, **options):
        path = Path(settings.DATA_DIR) / STATE_FILE
        saved = _read(path)
        try:
            with transaction.atomic():
                password = self._web_user(user, saved.get(("PASSWORD", user), ""))
                key = self._agent(agent, user, saved.get(("KEY", agent), ""))
        except InvalidInput as exc:
            raise CommandError(exc.message) from None
        state = {**saved, ("PASSWORD", user): password, ("KEY", agent): key}
        if state != saved:
            _write(path, state)
        self.stdout.write(f"PASSWORD={shlex.quote(password)}")
        self.stdout.write(f"KEY={shlex.quote(key)}")
        self.stderr.write(
            f"Web user {user!r} (password in $PASSWORD) may be asked by agent {agent!r} (key in $KEY); "
            f"both kept in {path} for the next run."
        )

    def _web_user(self, username: str, saved: str) -> str:
        """The user's password: the saved one while it still signs them in; a new user gets a new one."""
        User = get_user_model()
        person = User.objects.filter(username=username).first()
        if person is None:
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser(username=username, email="", password=password)
            return password
        if saved and person.check_password(saved):
            return saved
        raise CommandError(
            f"a user named {username!r} already exists, and its password is not one this command set: "
            f"sign in as them with the password they have, or run it with --user <another name>"
        )

    def _agent(self, name: str, username: str, saved: str) -> str:
        """The agent's key: the saved one while it still authenticates as this agent, else a new one."""
        agent = Agent.objects.filter(name=name).first()
        if agent is None:
            agent, key = services.agent_create(name=name, webhook_url="", web_users=[username], bots=[], actor=ACTOR)
            return key
        services.agent_grant(agent=agent, username=username, actor=ACTOR)  # nothing changes when granted
        if saved and _authenticates(saved, agent):
            return saved
        if not agent.is_active:
            raise CommandError(f"the agent {name!r} is deactivated: run it with --agent <another name>")
        self.stderr.write(f"No working key of agent {name!r} was kept: it gets a new one (its old key stops working).")
        return services.agent_rotate_key(agent=agent)


def _authenticates(key: str, agent: Agent) -> bool:
    try:
        return selectors.agent_for_authorization(f"Bearer {key}").pk == agent.pk
    except Unauthenticated:
        return False


Saved = dict[tuple[str, str], str]  # ("PASSWORD", username) or ("KEY", agent name) -> the secret


def _read(path: Path) -> Saved:
    """The saved ``PASSWORD <user> <password>`` and ``KEY <agent> <key>`` lines (each word
    shell-quoted); nothing when the file is missing or unreadable, a line that is not one of them
    skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return {}
    saved: Saved = {}
    for line in text.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if len(words) == 3 and words[0] in ("PASSWORD", "KEY"):
            saved[(words[0], words[1])] = words[2]
    return saved


def _write(path: Path, state: Saved) -> None:
    """Replace the file at once, readable by its owner only (``mkstemp`` creates it 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{STATE_FILE}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(f"{kind} {shlex.quote(name)} {shlex.quote(secret)}\n"
                              for (kind, name), secret in state.items()))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
