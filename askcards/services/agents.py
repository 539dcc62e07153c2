"""Agents (keys, grants, webhooks, their event feed) and the platform bots."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models, transaction

from askcards import crypto, jsonlimits, netguard, outbox
from askcards.errors import InvalidInput
from askcards.models import Agent, Bot

if TYPE_CHECKING:
    # What get_user_model() returns: settings leave AUTH_USER_MODEL at Django's own.
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


def agent_webhook_url_check(*, url: str) -> str:
    """The webhook URL to store for an agent ("" for none); InvalidInput saying what is wrong.

    Every way of setting a webhook URL (command, admin, services) goes through here: http or
    https only, and a literal link-local/metadata address is refused, a loopback/private one
    unless ASKCARDS_WEBHOOK_ALLOW_PRIVATE=true. A hostname is checked again on every delivery,
    on the addresses it resolves to then (``netguard``)."""
    return netguard.check_url(url, allow_private=settings.ASKCARDS_WEBHOOK_ALLOW_PRIVATE)


def agent_create(
    *, name: str, webhook_url: str = "", web_users: Sequence[str] = (), actor: str = "operator"
) -> tuple[Agent, str]:
    """Create an agent granted ``web_users`` (see agent_grant); returns it and its API key, which
    is shown this once and stored hashed. InvalidInput (nothing created) for a blank or taken
    name, a refused webhook URL or an unknown username."""
    if not name.strip():
        raise InvalidInput("agent name must not be blank")
    _check_columns(Agent, name=name, webhook_url=webhook_url)
    webhook_url = agent_webhook_url_check(url=webhook_url)
    if Agent.objects.filter(name=name).exists():
        raise InvalidInput(f"an agent named {name!r} already exists")
    users = [_granted_user(username) for username in dict.fromkeys(web_users)]
    key = crypto.new_agent_key()
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name,
            key_hash=crypto.hash_agent_key(key),
            key_hint=key[:10],
            webhook_url=webhook_url,
            webhook_secret=crypto.new_webhook_secret() if webhook_url else "",
        )
        agent.web_users.add(*users)
    for username in dict.fromkeys(web_users):
        logger.info("agent %s granted web user %s by %s", agent.name, username, actor)
    return agent, key


def _check_columns(model: type[models.Model], **values: object) -> None:
    """Raise InvalidInput unless each value fits its column on every database: at most the field's
    max_length (SQLite would store more, PostgreSQL refuses it mid-transaction) and no NUL or
    lone surrogate (a command line's undecodable bytes arrive as lone surrogates)."""
    for name, value in values.items():
        if not isinstance(value, str):
            continue
        try:
            jsonlimits.check_text(value, name)
        except jsonlimits.JSONRefused as exc:
            raise InvalidInput(str(exc)) from None
        field = next((f for f in model._meta.concrete_fields if f.name == name), None)
        limit = field.max_length if field is not None else None
        if limit is not None and len(value) > limit:
            raise InvalidInput(f"{model.__name__.lower()} {name} is longer than {limit} characters ({len(value)} given)")


def agent_rotate_key(*, agent: Agent) -> str:
    """Replace the agent's key; the old one stops working at once."""
    key = crypto.new_agent_key()
    Agent.objects.filter(pk=agent.pk).update(key_hash=crypto.hash_agent_key(key), key_hint=key[:10])
    agent.key_hash, agent.key_hint = crypto.hash_agent_key(key), key[:10]
    return key


def _granted_user(username: str) -> User:
    """The Django user an operator names in a grant; InvalidInput (saying so) when none has that name."""
    User = get_user_model()
    user = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
    if user is None:
        raise InvalidInput(
            f"no Django user named {username!r}: create the user first "
            "(python manage.py createsuperuser, or Users in the admin)"
        )
    return user


def agent_grant(*, agent: Agent, username: str, actor: str) -> bool:
    """Let ``agent``'s sessions name the Django user ``username`` as their web_user (ask on that
    user's panel). Idempotent: False when the grant already existed. Raises InvalidInput for an
    unknown username (the operator's tools may say so; agents never see this)."""
    user = _granted_user(username)
    with transaction.atomic():
        if agent.web_users.filter(pk=user.pk).exists():
            return False
        agent.web_users.add(user)
    logger.info("agent %s granted web user %s by %s", agent.name, username, actor)
    return True


def agent_revoke(*, agent: Agent, username: str, actor: str) -> bool:
    """Withdraw a grant. Idempotent: False when there was none. Sessions that name the user keep
    it, and their asks already pending stay answerable on the panel; the agent's next session
    upsert or tool call naming the user is refused with WebUserNotGranted."""
    user = _granted_user(username)
    with transaction.atomic():
        if not agent.web_users.filter(pk=user.pk).exists():
            return False
        agent.web_users.remove(user)
    logger.info("agent %s lost its grant of web user %s, revoked by %s", agent.name, username, actor)
    return True


def agent_grants_set(*, agent: Agent, usernames: Sequence[str], actor: str) -> tuple[list[str], list[str]]:
    """Make ``usernames`` exactly the web users ``agent`` is granted, through agent_grant and
    agent_revoke. Returns the usernames (granted, revoked)."""
    wanted = dict.fromkeys(usernames)
    current = [user.get_username() for user in agent.web_users.all()]
    granted = [name for name in wanted if agent_grant(agent=agent, username=name, actor=actor)]
    revoked = [name for name in current if name not in wanted and agent_revoke(agent=agent, username=name, actor=actor)]
    return granted, revoked


BOT_BASE_URLS: dict[str, str] = {
    Bot.Platform.FEISHU: "https://open.feishu.cn",
    Bot.Platform.DINGTALK: "https://api.dingtalk.com",
}


def bot_add(
    *, platform: str, app_id: str, app_secret: str, base_url: str = "", **secrets_and_options: str | bool
) -> Bot:
    """Register a Feishu or DingTalk app. Secrets are encrypted at rest."""
    if platform not in Bot.Platform.values:
        raise InvalidInput(f"platform must be feishu or dingtalk, got {platform!r}")
    if not app_id.strip() or not app_secret.strip():
        raise InvalidInput("app id and app secret must not be blank")
    _check_columns(Bot, app_id=app_id, app_secret=app_secret, base_url=base_url, **secrets_and_options)
    if Bot.objects.filter(platform=platform, app_id=app_id).exists():
        raise InvalidInput(f"a {platform} bot with id {app_id!r} already exists")
    bot = Bot(platform=platform, app_id=app_id, app_secret=app_secret, base_url=base_url or BOT_BASE_URLS[platform])
    for name, value in secrets_and_options.items():
        if value is not None:
            setattr(bot, name, value)
    bot.full_clean()
    bot.save()
    return bot


def events_acknowledge(*, agent: Agent, upto: int) -> int:
    """The agent acknowledged its events up to ``upto`` (``POST /events/ack``; reading the feed
    is a GET and changes nothing): those events are delivered, not webhooked again, and the
    results they carry start their retention clock."""
    return outbox.acknowledge(agent=agent, upto=upto)


def events_retry(*, event_ids: list[int]) -> int:
    """Operator action: make failed or waiting webhook deliveries due at once."""
    return outbox.retry_now(event_ids)
