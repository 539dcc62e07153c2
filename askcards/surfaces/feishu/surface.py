"""Asks mounted as forms on the session's running Feishu progress card, and the card's sync.

State lives in the database: a ``ProgressCard`` per run and its ``CardMessage`` (the Feishu
message, with a desired ``version`` and the ``synced_version`` last pushed). Every change bumps
``version`` in the change's own transaction (``services.card_touch``, or ``mark`` below); the
worker's card-sync lane then sends or PATCHes the card, rendered from the latest state at send time:

- one push in flight per message: a worker claims the message by moving ``next_sync_at`` ahead;
- at most 5 pushes per second per message: after a push ``next_sync_at`` is 200 ms later
  (``surfaces.sync.CARD_PUSH_INTERVAL``; the claim, pacing and backoff are shared with DingTalk);
- a change during a push leaves ``version`` ahead, so one more push follows — clicker and group
  converge on the same final card;
- failures back off (honouring Feishu's ``x-ogw-ratelimit-reset``) and retry; a card that cannot
  be sent at all fails the asks shown nowhere else with ``delivery_failed`` — so does a card still
  unsent when its bot's grant to the session's agent was revoked (a sent one is still PATCHed);
- the card JSON itself is not stored (``CardMessage.pushed`` stays empty for Feishu): it is
  rendered again from the state whenever needed, and up to 30 KB per PATCH is not worth writing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from askcards import selectors
from askcards.db import statements
from askcards.models import Ask, Bot, CardMessage, ProgressCard, Session
from askcards.surfaces import sync
from askcards.surfaces.base import Surface, SyncReport
from askcards.surfaces.http import thread_client

from .cards import (
    ANSWERED_ON, WITHDRAWN_SHOWN, WITHDRAWN_TEXT, PendingAsk, ProgressView, RenderedCard, WithdrawnAsk,
    render_progress_card,
)
from .client import FeishuClient, FeishuError

logger = logging.getLogger(__name__)

NAME = "feishu"
TOOL = "ask_user_questions"
SEND_ATTEMPTS = 5  # a first send failing this often (or permanently) fails the card's asks
BATCH = 50
# A form takes at least 7 of a card's 200 elements, so no more than this many can ever show.
MAX_FORMS = 30



def new_client(bot: Bot, **options: Any) -> FeishuClient:
    """A new client of the bot (no connection or token reused): the one place one is built.
    ``options``: FeishuClient's (timeout, max_attempts, backoff)."""
    return FeishuClient(bot.app_id, bot.app_secret, bot.base_url, **options)


def client_for(bot: Bot) -> FeishuClient:
    """This thread's client of the bot (its HTTP connection to Feishu is reused).

    One attempt per push: the sync lane retries through next_sync_at instead of sleeping."""
    return thread_client(bot, lambda: new_client(bot, max_attempts=1))


def latest_card(session: Session) -> ProgressCard | None:
    return ProgressCard.objects.runs_of(session.pk).first()


def live_card(session: Session) -> ProgressCard | None:
    """The card asks of the session mount on: the latest run's, while it is running."""
    card = latest_card(session)
    return card if card is not None and card.is_live else None


def panel_url() -> str:
    base = getattr(settings, "ASKCARDS_PUBLIC_URL", "")
    return f"{base.rstrip('/')}/panel/" if base else ""


def pending_asks() -> QuerySet[Ask]:
    """Pending asks in registration order, with what a form needs; a card loads at most
    ``MAX_FORMS + 1`` of a session's (one more says whether there are more than can ever fit)."""
    return Ask.objects.filter(status=Ask.Status.PENDING).order_by("created_at", "id").only(*statements.FORM_FIELDS)


def render(card: ProgressCard, shown: CardAsks | None = None) -> RenderedCard:
    """The card as it must look now: forms for the session's pending Feishu asks while live, and
    the run's withdrawn asks. ``shown``: the session's ``card_asks``, when the caller read them
    already (sync_due, for its whole batch)."""
    session = card.session
    if shown is None:
        shown = card_asks([session.id]).get(session.id, NOTHING_SHOWN)
    asks, more = [], 0
    if card.is_live:
        rows = shown.pending
        if len(rows) > MAX_FORMS:  # more than could ever fit: count the rest instead of loading it
            more = pending_asks().filter(session=session).count() - MAX_FORMS
            rows = rows[:MAX_FORMS]
        asks = [PendingAsk(id=ask.id, questions=ask.questions or [], sender=ask.sender_id) for ask in rows if NAME in ask.surfaces]
    view = ProgressView(
        status=card.shown_status,
        title=card.title,
        content=card.content,
        session_id=session.id,
        sender=card.sender_id,
        detail_url=card.detail_url,
        panel_url=panel_url() if session.web_user else "",
        asks=asks,
        more_asks=more,
        withdrawn=withdrawn_asks(card, shown.withdrawn),
    )
    return render_progress_card(view)


@dataclass(frozen=True)
class CardAsks:
    """What a session's progress card shows of its asks (``card_asks``)."""

    pending: list[Ask]  # the first MAX_FORMS + 1 pending, in registration order
    withdrawn: list[Ask]  # the latest WITHDRAWN_SHOWN * 3 withdrawn after being shown, newest first


NOTHING_SHOWN = CardAsks(pending=[], withdrawn=[])


def card_asks(session_ids: list[str]) -> dict[str, CardAsks]:
    """The sessions' asks their cards show, in one statement (``db.statements.card_asks``); a
    session with none is left out."""
    found = statements.card_asks(session_ids, pending=MAX_FORMS + 1, withdrawn_reasons=tuple(WITHDRAWN_TEXT),
                                 withdrawn=WITHDRAWN_SHOWN * 3, answered_on=tuple(ANSWERED_ON))
    return {session_id: CardAsks(pending, withdrawn) for session_id, (pending, withdrawn) in found.items()}


def withdrawn_asks(card: ProgressCard, rows: list[Ask]) -> list[WithdrawnAsk]:
    """The run's latest asks that left this card for a reason the card alone cannot tell
    (``WITHDRAWN_TEXT``'s reasons, an answer on an ``ANSWERED_ON`` surface), newest first: each
    was shown here (activated, a Feishu ask) and ended since the run's card was made. ``rows``:
    the session's latest such asks (``card_asks``), newest first; those that ended since the
    card was made lead them."""
    withdrawn = [WithdrawnAsk(id=ask.id, what=_header(ask), reason=ask.reason, surface=ask.closed_on) for ask in rows
                 if ask.closed_at is not None and ask.closed_at >= card.created_at and NAME in ask.surfaces]
    return withdrawn[:WITHDRAWN_SHOWN]


def _header(ask: Ask) -> str:
    questions = ask.questions or []
    first = questions[0] if questions and isinstance(questions[0], dict) else {}
    return str(first.get("header") or "问题")


class FeishuSurface(Surface):
    name = NAME
    platform = Bot.Platform.FEISHU

    def client(self, bot: Bot, *, timeout: float, max_attempts: int, backoff: float) -> FeishuClient:
        return new_client(bot, timeout=timeout, max_attempts=max_attempts, backoff=backoff)

    def reachable(self, session: Session, tool: str) -> bool:
        if tool != TOOL or session.platform != Session.Platform.FEISHU or session.is_subagent:
            return False
        bot = session.bot
        return bot is not None and bot.is_active and bot.platform == Bot.Platform.FEISHU and live_card(session) is not None

    def deliver(self, ask: Ask) -> None:
        """Nothing to send up front: the form is part of the card's next render."""

    def mark(self, ask: Ask) -> None:
        """In the transition's transaction: the session's latest card (``runs_of``'s first, the
        highest id) needs one more render.

        A hand-written statement (``db.statements.progress_card_mark``): this runs inside every
        answer's transaction, and the ORM built its subquery anew each time, a large share of a
        callback's CPU (bench_statements)."""
        statements.progress_card_mark(session_id=ask.session_id)

    def show(self, ask: Ask) -> None:
        """Marked in the activation's transaction; the worker's card sync sends it."""

    def withdraw(self, ask: Ask) -> None:
        """Marked in the transition's transaction; the worker's card sync PATCHes it."""

    def sync_due(self, now: datetime, report: SyncReport) -> int:
        due = sync.due_card_messages(now, platform=Bot.Platform.FEISHU, limit=BATCH, progress_card__isnull=False)
        # The batch's rows and what their cards show of their sessions' asks in two statements,
        # not one per card. Read before each message's claim: if anything changed since, its
        # version changed too, and the card is pushed once more.
        rows = CardMessage.objects.select_related("bot", "progress_card__session").in_bulk(due)
        # Every row has a progress card (the filter above); the session id is read through it.
        session_of = {pk: message.progress_card.session_id for pk, message in rows.items() if message.progress_card}
        shown = card_asks(list(session_of.values()))
        return sum(
            sync_message(rows[pk], report, now=now, shown=shown.get(session_of[pk], NOTHING_SHOWN))
            for pk in due if pk in session_of
        )


def sync_message(message: CardMessage, report: SyncReport, *, now: datetime | None = None,
                 shown: CardAsks | None = None) -> bool:
    """Push one card message (read with its bot, card and session; ``shown``: what the card shows
    of the session's asks, read with it, else read here) if it is still due and no other worker holds it; True if this call pushed.
    A card whose first send failed for good goes into ``report``."""
    now = now or timezone.now()
    # The claim also checks the message id read with the row: had another worker sent the card
    # meanwhile, this row is stale and the next pass reads it again.
    if not sync.claim_card_message(message.pk, now, message_id=message.message_id):
        return False
    pk = message.pk
    version = message.version  # read before rendering: the render is at least this new
    card = message.progress_card
    assert card is not None  # a progress card's message (sync_due reads no other)
    if not message.message_id and not selectors.bot_granted(agent_id=card.session.agent_id, bot_id=message.bot_id):
        # Queued before the bot was revoked, never sent: a revoke refuses every new message.
        error = f"bot {message.bot.app_id} is no longer granted to the session's agent: the card was not sent"
        sync.card_push_failed(message, error, version=version, started=timezone.now(), gave_up=True)
        report.unsent_progress_cards.append((card.pk, error))
        return True
    rendered = render(card, shown)
    started = timezone.now()
    try:
        message_id = _push(message, card, rendered)
    except FeishuError as exc:
        if _failed(message, exc, version, started):
            report.unsent_progress_cards.append((card.pk, str(exc)))
        return True
    sync.card_pushed(pk, version=version, started=started, message_id=message_id)
    return True


def _push(message: CardMessage, card: ProgressCard, rendered: RenderedCard) -> str:
    client = client_for(message.bot)
    if message.message_id:
        client.patch_card(message.message_id, rendered.card)
        return message.message_id
    session = card.session
    uuid = f"askcards-progress-{card.pk}"  # Feishu sends one message per uuid within an hour
    if card.reply_to:
        sent = client.reply_card(card.reply_to, rendered.card, uuid)
    elif session.chat_type == Session.ChatType.GROUP:
        sent = client.send_card("chat_id", session.chat_id, rendered.card, uuid)
    else:
        sent = client.send_card("open_id", session.user_id, rendered.card, uuid)
    logger.info("feishu progress card %s sent as %s", card.pk, sent.message_id)
    return sent.message_id


def _failed(message: CardMessage, exc: FeishuError, version: int, started: datetime) -> bool:
    """Retry a transient failure later; give up on this state after a permanent one (a later
    change tries again). True when a first send cannot succeed: the asks waiting on the card
    must fail (the worker's part)."""
    gave_up = exc.permanent or (not message.message_id and message.sync_attempts + 1 >= SEND_ATTEMPTS)
    sync.card_push_failed(
        message, str(exc), version=version, started=started, gave_up=gave_up, retry_after=exc.retry_after or 0
    )
    return gave_up and not message.message_id
