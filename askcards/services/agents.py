"""Agents (keys, grants, webhooks, their event feed) and the platform bots."""
from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import ProtectedError

from askcards import crypto, outbox, surfaces
from askcards.http import jsonlimits, netguard
from askcards.errors import InvalidInput, NotFound
from askcards.models import Agent, Ask, Bot, Session
from askcards.surfaces.dingtalk.client import DingTalkError
from askcards.surfaces.feishu.client import FeishuError
from askcards.surfaces.http import PlatformError

from .asks import ask_results_delivered

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
    *, name: str, webhook_url: str = "", web_users: Sequence[str] = (), bots: Sequence[Bot] = (),
    actor: str = "operator",
) -> tuple[Agent, str]:
    """Create an agent granted ``web_users`` (see agent_grant) and ``bots`` (agent_bot_grant);
    returns it and its API key, which is shown this once and stored hashed. InvalidInput (nothing
    created) for a blank or taken name, a refused webhook URL or an unknown username."""
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
        agent.bots.add(*bots)
    for username in dict.fromkeys(web_users):
        logger.info("agent %s granted web user %s by %s", agent.name, username, actor)
    for bot in bots:
        logger.info("agent %s granted %s bot %s by %s", agent.name, bot.platform, bot.app_id, actor)
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


def bot_find(*, ref: str) -> Bot:
    """The bot an operator names in a grant: its app id / client id, or ``platform:app_id`` when
    both platforms have that id. InvalidInput saying how to list the bots otherwise."""
    prefix, colon, rest = ref.partition(":")
    platform, app_id = (prefix, rest) if colon and prefix in Bot.Platform.values else ("", ref)
    bots = list(Bot.objects.filter(app_id=app_id, **({"platform": platform} if platform else {}))[:2])
    if not bots:
        raise InvalidInput(f"no bot with id {ref!r} (askcards_bot list shows the bots)")
    if len(bots) > 1:
        raise InvalidInput(f"both a feishu and a dingtalk bot have id {app_id!r}: name one as feishu:{app_id} or dingtalk:{app_id}")
    return bots[0]


def agent_bot_grant(*, agent: Agent, bot: Bot, actor: str) -> bool:
    """Let ``agent``'s sessions use ``bot`` (send its cards to the chats and people it reaches).
    Idempotent: False when the grant already existed."""
    with transaction.atomic():
        if agent.bots.filter(pk=bot.pk).exists():
            return False
        agent.bots.add(bot)
    logger.info("agent %s granted %s bot %s by %s", agent.name, bot.platform, bot.app_id, actor)
    return True


def agent_bot_revoke(*, agent: Agent, bot: Bot, actor: str) -> bool:
    """Withdraw a bot grant. Idempotent: False when there was none. Nothing already sent is closed
    (cards stay answerable, results still reach the agent); the agent's next session naming the
    bot, and its next ask on a session of the bot, are refused with BotNotGranted."""
    with transaction.atomic():
        if not agent.bots.filter(pk=bot.pk).exists():
            return False
        agent.bots.remove(bot)
    logger.info("agent %s lost its grant of %s bot %s, revoked by %s", agent.name, bot.platform, bot.app_id, actor)
    return True


def agent_bots_set(*, agent: Agent, bots: Sequence[Bot], actor: str) -> tuple[list[Bot], list[Bot]]:
    """Make ``bots`` exactly the bots ``agent`` is granted, through agent_bot_grant and
    agent_bot_revoke. Returns the bots (granted, revoked)."""
    wanted = {bot.pk: bot for bot in bots}
    current = list(agent.bots.all())
    granted = [bot for bot in wanted.values() if agent_bot_grant(agent=agent, bot=bot, actor=actor)]
    revoked = [bot for bot in current if bot.pk not in wanted and agent_bot_revoke(agent=agent, bot=bot, actor=actor)]
    return granted, revoked


BOT_BASE_URLS: dict[str, str] = {
    Bot.Platform.FEISHU: "https://open.feishu.cn",
    Bot.Platform.DINGTALK: "https://api.dingtalk.com",
}


def bot_add(
    *, platform: str, app_id: str, app_secret: str, base_url: str = "", **secrets_and_options: str | bool
) -> Bot:
    """Register a Feishu or DingTalk app. Secrets are encrypted at rest. InvalidInput for an option
    the platform does not use (``bot_options_check``), as ``bot_update`` refuses it."""
    if platform not in Bot.Platform.values:
        raise InvalidInput(f"platform must be feishu or dingtalk, got {platform!r}")
    if not app_id.strip() or not app_secret.strip():
        raise InvalidInput("app id and app secret must not be blank")
    bot_options_check(platform=platform, **secrets_and_options)
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


# What each platform's bot may set besides its id (the rest means nothing to it).
BOT_OPTIONS: dict[str, frozenset[str]] = {
    Bot.Platform.FEISHU: frozenset(
        {"app_secret", "name", "base_url", "verification_token", "encrypt_key", "is_active"}
    ),
    Bot.Platform.DINGTALK: frozenset(
        {"app_secret", "name", "base_url", "api_secret", "template_id", "callback_mode", "is_active"}
    ),
}
BOT_SECRETS = ("app_secret", "verification_token", "encrypt_key", "api_secret")


def _column_default(model: type[models.Model], name: str) -> object:
    field = model._meta.get_field(name)
    return field.get_default() if isinstance(field, models.Field) else None


def _unused_refusal(platform: str, names: list[str]) -> InvalidInput:
    takes = ", ".join(sorted(BOT_OPTIONS[platform]))
    return InvalidInput(f"a {platform} bot has no {', '.join(names)} (it takes: {takes})")


def bot_options_check(*, platform: str, **options: str | bool | None) -> None:
    """InvalidInput when ``options`` give a value, other than the field's default, to something a
    ``platform`` bot does not use (a Feishu bot's template id, a DingTalk bot's encrypt key): it
    would be stored and never read. A form adding a bot checks its input with this."""
    wrong = sorted(name for name, value in options.items() if name not in BOT_OPTIONS[platform] and value is not None
                   and value != _column_default(Bot, name))
    if wrong:
        raise _unused_refusal(platform, wrong)


def bot_get(*, platform: str, app_id: str) -> Bot:
    """The bot of this platform and app id (active or not); NotFound saying how to list them."""
    if platform not in Bot.Platform.values:
        raise InvalidInput(f"platform must be feishu or dingtalk, got {platform!r}")
    bot = Bot.objects.filter(platform=platform, app_id=app_id).first()
    if bot is None:
        raise NotFound(f"no {platform} bot with id {app_id!r} (askcards_bot list shows the bots)")
    return bot


def bot_update_check(*, bot: Bot, **changes: str | bool | None) -> dict[str, str | bool]:
    """What ``bot_update`` would write, without writing it: the changed fields and their new
    values ({} when nothing changes). InvalidInput for what it refuses: a field the platform does
    not use, a blank app secret, a value too long for its column, an invalid base URL or callback
    mode. ``bot`` is left as it was (a form checks its input with this before saving)."""
    takes = BOT_OPTIONS[bot.platform]
    wrong = sorted(name for name, value in changes.items() if value is not None and name not in takes)
    if wrong:
        raise _unused_refusal(bot.platform, wrong)
    wanted = {name: value for name, value in changes.items() if value is not None}
    if "app_secret" in wanted and not str(wanted["app_secret"]).strip():
        raise InvalidInput("the app secret cannot be cleared; give the new one")
    _check_columns(Bot, **wanted)
    changed = {name: value for name, value in wanted.items() if getattr(bot, name) != value}
    if not changed:
        return {}
    candidate = copy.copy(bot)  # the bot as it would be, validated by the model's own rules
    candidate._state = copy.copy(bot._state)
    for name, value in changed.items():
        setattr(candidate, name, value)
    try:
        candidate.full_clean(validate_unique=False)
    except ValidationError as exc:
        raise InvalidInput("; ".join(f"{name}: {' '.join(errors)}" for name, errors in exc.message_dict.items())) from None
    return changed


def bot_update(*, bot: Bot, **changes: str | bool | None) -> list[str]:
    """Change a bot's options and secrets; a value of None keeps the field, "" clears it (the app
    secret cannot be cleared). Returns the names of the fields that changed. InvalidInput, and
    nothing saved, for what ``bot_update_check`` refuses."""
    changed = bot_update_check(bot=bot, **changes)
    if not changed:
        return []
    for name, value in changed.items():
        setattr(bot, name, value)
    bot.save(update_fields=list(changed))
    # Which fields, never their values: a secret in a log line is a leaked secret.
    logger.info("%s bot %s updated: %s", bot.platform, bot.app_id, ", ".join(sorted(changed)))
    return list(changed)


@dataclass(frozen=True)
class BotRemoval:
    deleted: bool  # False: retired (kept inactive) because sessions or cards refer to it
    sessions: int = 0
    pending_asks: int = 0


def bot_remove(*, bot: Bot) -> BotRemoval:
    """Delete the bot when nothing refers to it. A bot that sessions or cards still refer to is
    retired instead: marked inactive, so its callbacks are refused and no card is sent through it,
    while the history that names it stays (``bot_update(is_active=True)`` brings it back)."""
    try:
        with transaction.atomic():
            bot.delete()
    except (ProtectedError, IntegrityError):  # PROTECTed by sessions / card messages
        bot.is_active = False
        bot.save(update_fields=["is_active"])
        logger.info("%s bot %s retired (kept inactive: it is referred to)", bot.platform, bot.app_id)
        return BotRemoval(
            deleted=False,
            sessions=Session.objects.filter(bot=bot).count(),
            pending_asks=Ask.objects.filter(session__bot=bot, status=Ask.Status.PENDING).count(),
        )
    logger.info("%s bot %s removed", bot.platform, bot.app_id)
    return BotRemoval(deleted=True)


def bot_warnings(bot: Bot) -> list[str]:
    """What is configured but cannot work, in the operator's words (also a system check)."""
    warnings = []
    if bot.platform == Bot.Platform.DINGTALK and bot.callback_mode == Bot.CallbackMode.HTTP and not bot.api_secret:
        warnings.append(
            f"dingtalk bot {bot.app_id} takes HTTP callbacks but has no api secret: every card click is "
            "refused (401), because DingTalk signs its callbacks with it. Set it (askcards_bot update "
            f"dingtalk {bot.app_id} --api-secret …) or use Stream mode (--callback stream)."
        )
    return warnings


@dataclass(frozen=True)
class BotCheck:
    """The outcome of asking the platform for an access token with the bot's credentials.

    ``cause``: ok | credentials (the platform refused the id or secret) | network (no answer:
    DNS, refused connection, timeout, TLS) | http (another HTTP error status) | response (an
    answer without a token)."""

    ok: bool
    cause: str
    message: str
    http_status: int | None = None
    warnings: list[str] = field(default_factory=list)


# The token endpoints' answers to a wrong id or secret: Feishu 10003 (bad app_id) and 10015 (wrong
# secret), reference feishu §3.2; DingTalk 400 invalidClientIdOrSecret, reference dingtalk-platform.
FEISHU_CREDENTIAL_CODES = frozenset({10003, 10015})
DINGTALK_CREDENTIAL_CODES = frozenset({"invalidClientIdOrSecret"})


def bot_test(*, bot: Bot, timeout: float = 5.0) -> BotCheck:
    """Ask the platform for a fresh access token with the bot's stored credentials (the cached
    token is not used: it would hide a secret changed since). Never raises for a platform
    failure: the result says what failed. Nothing secret is put in the message."""
    where = bot.base_url
    client = surfaces.for_platform(bot.platform).client(bot, timeout=timeout, max_attempts=2, backoff=0.2)
    warnings = bot_warnings(bot)
    if not bot.is_active:
        warnings.append(f"{bot.platform} bot {bot.app_id} is inactive: its callbacks are refused and no card is sent")
    try:
        client.fetch_token()
    except PlatformError as exc:
        cause, status = _failure_cause(exc)
        return BotCheck(ok=False, cause=cause, message=_failure_text(bot, cause, status, exc), http_status=status,
                        warnings=warnings)
    return BotCheck(
        ok=True, cause="ok", message=f"{where} issued an access token for {bot.platform} app {bot.app_id}.",
        warnings=warnings,
    )


def _failure_cause(exc: PlatformError) -> tuple[str, int | None]:
    if isinstance(exc, FeishuError):
        status, code = exc.http_status, exc.code
        refused = code in FEISHU_CREDENTIAL_CODES
    elif isinstance(exc, DingTalkError):
        status, code_text = exc.status, exc.code
        refused = code_text in DINGTALK_CREDENTIAL_CODES
    else:  # every client raises its own subclass; anything else had no usable answer
        return "response", None
    if status is None:
        return ("network" if not exc.permanent else "response"), None
    if refused:
        return "credentials", status
    if status >= 400:
        return "http", status
    return "response", status


def _failure_text(bot: Bot, cause: str, status: int | None, exc: PlatformError) -> str:
    platform = "Feishu" if bot.platform == Bot.Platform.FEISHU else "DingTalk"
    id_flags = "--app-id / --app-secret" if bot.platform == Bot.Platform.FEISHU else "--client-id / --client-secret"
    if cause == "credentials":
        return (f"{platform} refused the app id or secret of {bot.platform} bot {bot.app_id} (HTTP {status}). "
                f"Check them in the platform's developer console ({id_flags}); set a new secret with "
                f"askcards_bot update {bot.platform} {bot.app_id}. [{exc.message}]")
    if cause == "network":
        return (f"could not reach {bot.base_url} for {bot.platform} bot {bot.app_id}: no answer. Check the "
                f"base URL, DNS, proxy and firewall of this host. [{exc.message}]")
    if cause == "http":
        return f"{bot.base_url} answered HTTP {status} for {bot.platform} bot {bot.app_id}. [{exc.message}]"
    return f"{bot.base_url} gave no usable access token for {bot.platform} bot {bot.app_id}. [{exc.message}]"


def events_acknowledge(*, agent: Agent, upto: int) -> int:
    """The agent acknowledged its events up to ``upto`` (``POST /events/ack``; reading the feed
    is a GET and changes nothing): those events are delivered, not webhooked again, and the
    results they carry start their retention clock."""
    delivered: list[str] = []
    count = outbox.acknowledge(agent=agent, upto=upto, delivered=delivered)
    if delivered:
        ask_results_delivered(ask_ids=delivered)
    return count


def events_retry(*, event_ids: list[int]) -> int:
    """Operator action: make failed or waiting webhook deliveries due at once."""
    return outbox.retry_now(event_ids)
