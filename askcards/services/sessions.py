"""Sessions: upsert, grants, inbound messages, an agent's restart, and callback receipts."""
from __future__ import annotations

import re
import shlex
from typing import Any

from django.db import IntegrityError, models, transaction
from django.utils import timezone

from askcards import selectors
from askcards.db import statements
from askcards.errors import InvalidInput, WebUserNotGranted
from askcards.models import Agent, Ask, Bot, Session

from .asks import ask_invalidate
from .feishu_progress import progress_recovering
from .grants import bot_not_granted

# Key patterns of the Feishu seed (§4.1): private chats and group workspaces.
FEISHU_PRIVATE_KEY = re.compile(r"^feishu-(?P<bot>[^-/]+)-private-(?P<user>.+)$")
FEISHU_GROUP_MARKER = "/feishu-chat/"


def infer_platform(key: str) -> tuple[str, str] | None:
    """(platform, chat_type) from a session key, as the Feishu seed names its sessions."""
    if FEISHU_PRIVATE_KEY.match(key):
        return Session.Platform.FEISHU, Session.ChatType.P2P
    if FEISHU_GROUP_MARKER in key:
        return Session.Platform.FEISHU, Session.ChatType.GROUP
    return None


def session_upsert(
    *,
    agent: Agent,
    key: str,
    platform: str | None = None,
    chat_type: str | None = None,
    bot: Bot | None = None,
    parent: Session | None = None,
    **fields: str,
) -> tuple[Session, bool]:
    """Create the session of ``key`` or update the fields given. Returns (session, created).

    Raises WebUserNotGranted / BotNotGranted (and writes nothing) when ``web_user`` / ``bot``
    names a user / bot the agent was not granted.
    """
    inferred = infer_platform(key)
    if platform is None and inferred:
        platform, chat_type = inferred[0], chat_type or inferred[1]
    if inferred is None and platform is None:
        existing = Session.objects.filter(agent=agent, key=key).first()
        if existing is None:
            raise InvalidInput(
                f"cannot infer the platform of session key {key!r}: give platform "
                "(feishu, dingtalk, wechat or web), or use a key like feishu-<botId>-private-<userId>"
            )
    # The Feishu seed's private key names the user; a session explicitly on another platform
    # (say web, keyed like a Feishu chat) does not take its user from the key.
    if inferred and platform == inferred[0] and not fields.get("user_id") and inferred[1] == Session.ChatType.P2P:
        match = FEISHU_PRIVATE_KEY.match(key)
        fields["user_id"] = match.group("user") if match else ""
        limit = Session._meta.get_field("user_id").max_length
        if limit is not None and len(fields["user_id"]) > limit:
            raise InvalidInput(f"the user_id in session key {key[:40]!r}… is longer than {limit} characters; give user_id")
    if parent is not None and parent.agent_id != agent.id:
        raise InvalidInput("parent must be a session of this agent")
    session_check_web_user(agent=agent, web_user=fields.get("web_user") or "")
    if bot is not None and not selectors.bot_granted(agent_id=agent.pk, bot_id=bot.pk):
        raise bot_not_granted(agent, bot.app_id)
    values: dict[str, Any] = {name: value for name, value in fields.items() if value is not None}
    if platform is not None:
        values["platform"] = platform
    if chat_type is not None:
        values["chat_type"] = chat_type
    if bot is not None:
        values["bot"] = bot
    if parent is not None:
        values["parent"] = parent
    existing = Session.objects.filter(agent=agent, key=key).first()
    if existing is not None and _unchanged(existing, values):
        # Clients that name their session on every request (MCP URLs) mostly repeat it: no write.
        return existing, False
    try:
        with transaction.atomic():
            session, created = Session.objects.update_or_create(agent=agent, key=key, defaults=values)
    except IntegrityError:
        # Two upserts of one key raced; the loser updates the winner's row.
        session = Session.objects.get(agent=agent, key=key)
        for name, value in values.items():
            setattr(session, name, value)
        session.save()
        created = False
    return session, created


def _unchanged(session: Session, values: dict[str, Any]) -> bool:
    for name, value in values.items():
        if isinstance(value, models.Model):
            if getattr(session, f"{name}_id") != value.pk:
                return False
        elif getattr(session, name) != value:
            return False
    return True


def session_bot(*, agent: Agent, app_id: str, platform: str | None, key: str) -> Bot:
    """The active bot a session of ``agent`` names by its ``app_id`` / ``client_id``, on the
    session's platform (given, or inferred from ``key``). BotNotGranted when there is no such
    active bot or the agent was not granted it: the same answer, so an agent cannot find out which
    apps exist."""
    platform = platform or (infer_platform(key) or (None,))[0]
    bots = Bot.objects.filter(app_id=app_id, is_active=True)
    if platform in Bot.Platform.values:
        bots = bots.filter(platform=platform)
    bot = bots.first()
    if bot is None or not selectors.bot_granted(agent_id=agent.pk, bot_id=bot.pk):
        raise bot_not_granted(agent, app_id)
    return bot


def session_check_web_user(*, agent: Agent, web_user: str) -> None:
    """Raise WebUserNotGranted unless ``web_user`` is blank or a user an operator granted ``agent``.

    An unknown username gets the very same answer as a known one not granted, so an agent
    cannot find out which usernames exist.
    """
    if web_user and not selectors.web_user_granted(agent=agent, web_user=web_user):
        command = shlex.join(["python", "manage.py", "askcards_agent", "grant", agent.name, web_user])
        raise WebUserNotGranted(
            f"agent {agent.name!r} may not ask web user {web_user!r}: it was not granted that user. "
            f"An operator grants it with `{command}` (or on the agent's admin page); "
            "otherwise leave web_user empty."
        )


def session_message(*, session: Session, sender_id: str = "") -> int:
    """An ordinary inbound message arrived: it supersedes the sender's open, non-targeted asks.

    Blocking asks (ask_user_questions) are not touched: the seed treats a text reply as a new
    inbound message, not as an answer, and the model is still waiting for its tool result.
    """
    asks = Ask.objects.filter(
        session=session, status__in=Ask.OPEN, target_type=Ask.Target.NONE, blocking=False
    )
    if sender_id:
        asks = asks.filter(sender_id=sender_id)
    return sum(
        ask_invalidate(ask=ask, reason=Ask.Reason.SUPERSEDED_BY_MESSAGE, actor=f"respondent:{sender_id}")
        for ask in asks
    )


def session_recover(*, session: Session) -> int:
    """The agent restarted (SPEC §5.5): its open non-targeted asks lose their context, and the
    Feishu card of the interrupted run says so."""
    asks = Ask.objects.filter(session=session, status__in=Ask.OPEN, target_type=Ask.Target.NONE)
    invalidated = sum(ask_invalidate(ask=ask, reason=Ask.Reason.RESTART, actor=f"agent:{session.agent.name}") for ask in asks)
    progress_recovering(session=session)
    return invalidated


def agent_recover(*, agent: Agent) -> int:
    return sum(session_recover(session=session) for session in Session.objects.filter(agent=agent).select_related("agent"))


# ----------------------------------------------------------------------------- callback receipts


def callback_receipt(*, platform: str, event_id: str) -> bool:
    """Record a platform callback's event id; False when it was handled before (a re-delivery).

    The unique (platform, event_id) row decides, inside the caller's transaction: a concurrent
    duplicate waits for the first and then records nothing. A hand-written statement
    (``db.statements.callback_receipt_insert``): the ORM's insert needed a savepoint to survive a
    duplicate, which cost a Feishu submit a noticeable share of its CPU on PostgreSQL
    (bench_statements measures it).
    Receipts are kept for ``retention.CALLBACK_RECEIPT_TTL``, then pruned by
    ``retention.receipts_prune``."""
    return statements.callback_receipt_insert(platform=platform, event_id=event_id[:200], created_at=timezone.now())
