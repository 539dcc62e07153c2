"""DingTalk form cards for ``dingtalk_ask_user_question`` (SPEC §6.2) and their card-sync lane.

An ask is one card: ``deliver`` creates it with ``createAndDeliver`` before the ask activates (a
failure raises ``DeliveryFailed`` → ``delivery_failed``) and records it as a ``CardMessage``
(``message_id`` = outTrackId, ``pushed`` = the variables DingTalk holds). After that, every change
of the ask bumps the message's ``version`` — activation and every ending in the transition's own
transaction (``mark``), so a crash right after the commit still leaves the card to converge; a
targeted respondent's progress after its commit (``show``); ``dispatch_failed`` when the outbox
gives up. The worker's card-sync lane computes the variables the card must show now
(reference §4), diffs them against ``pushed`` and PUTs only the changed keys:

- one PUT in flight per card: a worker claims the message by moving ``next_sync_at`` ahead;
- at most 5 PUTs per second per card (``surfaces.sync.CARD_PUSH_INTERVAL``), well inside DingTalk's 20 QPS per app;
- a change during a PUT leaves ``version`` ahead, so one more PUT follows;
- throttles, 5xx and timeouts back off and retry; a permanent error gives up on that state.

Nothing here runs on a callback's critical path: the callback answers from the database alone
(``callback_response``: the card's public state in ``cardData``, the clicker's own view in
``userPrivateData``); the PUT for everyone else follows from the sync lane.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from askcards.models import Ask, Bot, CardMessage, Respondent, Session, new_out_track_id
from askcards.surfaces import sync
from askcards.surfaces.base import DeliveryFailed, Surface, SyncReport
from askcards.surfaces.http import thread_client
from askcards.tools import dingtalk_ask_user_question as dt

from . import cards
from .client import CallbackRegistration, DeliveryError, DingTalkClient, DingTalkError

logger = logging.getLogger(__name__)

NAME = "dingtalk"
BATCH = 50

# A private text variable of the template (docs/surfaces/dingtalk.md): what the clicker alone
# reads when a click did not count (texts: cards.NOTICES) — the reference gives no feedback at all.
NOTICE = "user_notice"


def new_client(bot: Bot, **options: Any) -> DingTalkClient:
    """A new client of the bot (no connection or token reused): the one place one is built.
    ``options``: DingTalkClient's (timeout, max_attempts, backoff)."""
    return DingTalkClient(bot.app_id, bot.app_secret, bot.base_url, **options)


def client_for(bot: Bot, *, max_attempts: int = 1) -> DingTalkClient:
    """This thread's client of the bot (its HTTP connection to DingTalk is reused).

    One attempt per PUT by default: the sync lane retries through next_sync_at instead of sleeping."""
    return thread_client(bot, lambda: new_client(bot, max_attempts=max_attempts), max_attempts)


def template_for(bot: Bot) -> str:
    return bot.template_id or cards.TEMPLATE_ID


def route_key_for(bot: Bot) -> str | None:
    """HTTP cards call back through the registered route; Stream cards over the Stream connection."""
    return client_for(bot).default_route_key if bot.callback_mode == Bot.CallbackMode.HTTP else None


def register_callback(bot: Bot, url: str, *, force: bool = False) -> CallbackRegistration:
    """Bind the bot's HTTP callback route to ``url``, signed with its api_secret (platform §1.2).
    Without ``force`` an existing registration is left as it is (and returned)."""
    if not bot.api_secret:
        raise DingTalkError(
            f"DingTalk bot {bot.app_id} has no api_secret: set one (askcards_bot, admin) so callbacks can be verified",
            code="invalid_request",
        )
    return client_for(bot, max_attempts=3).register_callback(url, bot.api_secret, force)


# ---------------------------------------------------------------------------- what the card shows


def timeout_minutes(ask: Ask) -> int:
    return max(1, round((ask.deadline - ask.created_at).total_seconds() / 60))


def initiator_name(ask: Ask) -> str:
    session = ask.session
    if session.user_name and ask.sender_id.casefold() == session.user_id.casefold():
        return session.user_name
    return ask.sender_id


def submission_of(respondent: Respondent | None) -> dt.Submission | None:
    stored = respondent.answers if respondent is not None else None
    if not isinstance(stored, dict):
        return None
    return dt.Submission(list(stored.get("answers") or []), list(stored.get("values") or []))


def desired_variables(ask: Ask, message: CardMessage) -> dict[str, str]:
    """Every card variable for the ask's committed state (reference §4)."""
    respondents = list(ask.respondents.all())
    targeted = ask.target_type != Ask.Target.NONE
    reason = message.card_reason or ("" if ask.is_open else ask.reason)
    state = cards.CardState(
        question_id=ask.id,
        title=ask.title,
        description=ask.description,
        fields=ask.fields or [],
        reason=reason,
        targeted=targeted,
        initiator=initiator_name(ask),
        timeout_minutes=timeout_minutes(ask),
        received=sum(r.status != Respondent.Status.PENDING for r in respondents),
        total=len(respondents),
        submission=None if targeted else submission_of(respondents[0] if respondents else None),
        answered_on="" if targeted or not respondents else respondents[0].surface,
    )
    return cards.card_variables(state)


def space_of(ask: Ask) -> tuple[str, str, bool]:
    """(space kind, space id, forwarding allowed): targeted cards go to their target, unforwardable."""
    if ask.target_type != Ask.Target.NONE:
        return ask.target_type, ask.target_id, False
    session = ask.session
    if session.chat_type == Session.ChatType.GROUP:
        return "group", session.chat_id, True
    return "user", session.user_id or ask.sender_id, True


# ------------------------------------------------------------------------------- the surface


class DingTalkSurface(Surface):
    name = NAME
    platform = Bot.Platform.DINGTALK

    def client(self, bot: Bot, *, timeout: float, max_attempts: int, backoff: float) -> DingTalkClient:
        return new_client(bot, timeout=timeout, max_attempts=max_attempts, backoff=backoff)

    def reachable(self, session: Session, tool: str) -> bool:
        if tool != dt.NAME or session.platform != Session.Platform.DINGTALK or session.is_subagent:
            return False
        bot = session.bot
        return bot is not None and bot.is_active and bot.platform == Bot.Platform.DINGTALK

    def deliver(self, ask: Ask) -> None:
        """createAndDeliver the card. The CardMessage row is written first, so a crash after
        DingTalk created the card still leaves its outTrackId to update."""
        bot = ask.session.bot
        assert bot is not None  # reachable() offers this surface only to sessions with a bot
        kind, space_id, forward = space_of(ask)
        variables = desired_variables(ask, CardMessage(card_reason=""))
        message = CardMessage.objects.create(
            platform=Bot.Platform.DINGTALK, bot=bot, ask=ask, message_id=new_out_track_id(), version=1, synced_version=1
        )
        try:
            delivery = client_for(bot, max_attempts=3).create_and_deliver(
                out_track_id=message.message_id,
                template_id=template_for(bot),
                card_data=variables,
                space_kind=kind,
                space_id=space_id,
                support_forward=forward,
                callback_route_key=route_key_for(bot),
            )
        except DeliveryError as exc:
            messages = [str(entry.get("errorMsg") or "") if isinstance(entry, dict) else "" for entry in exc.failed]
            CardMessage.objects.filter(pk=message.pk).update(last_error=str(exc)[:500])
            raise DeliveryFailed(dt.delivery_error(failed_messages=messages)) from exc
        except DingTalkError as exc:
            CardMessage.objects.filter(pk=message.pk).update(last_error=str(exc)[:500])
            raise DeliveryFailed(
                dt.delivery_error(status=exc.status, code=exc.code, message=exc.detail or exc.message)
            ) from exc
        with transaction.atomic():
            CardMessage.objects.filter(pk=message.pk).update(pushed=variables, open_space_id=delivery.open_space_id)
            # An ending that committed before this card's row existed (a new message right after
            # the reservation) marked nothing: mark the card now. Locking the ask waits for an
            # ending still in flight, whose mark then sees the row.
            if not Ask.objects.select_for_update().filter(pk=ask.pk, status=Ask.Status.RESERVED).exists():
                touch(ask)
        logger.info("dingtalk card %s delivered for ask %s (bot %s)", message.message_id, ask.id, bot.app_id)

    def mark(self, ask: Ask) -> None:
        """In the transition's transaction (activation, every ending): the card needs one more PUT."""
        touch(ask)

    def show(self, ask: Ask) -> None:
        """Marked in the transaction that made it showable (activation, a collection's response);
        the worker's card sync PUTs it."""

    def withdraw(self, ask: Ask) -> None:
        """Marked in the transition's transaction; the worker's card sync PUTs the ending."""

    def result_undeliverable(self, ask: Ask) -> None:
        """The ask's result never reached the agent: its card says to send an ordinary message."""
        if (ask.result or {}).get("message"):
            CardMessage.objects.filter(ask=ask, platform=Bot.Platform.DINGTALK).update(
                card_reason="dispatch_failed", version=F("version") + 1
            )

    def sync_due(self, now: datetime, report: SyncReport) -> int:
        due = sync.due_card_messages(now, platform=Bot.Platform.DINGTALK, limit=BATCH, ask__isnull=False)
        return sum(sync_message(pk, now=now) for pk in due)


def touch(ask: Ask) -> None:
    CardMessage.objects.filter(ask_id=ask.pk, platform=Bot.Platform.DINGTALK).update(version=F("version") + 1)


def sync_message(pk: int, *, now: datetime | None = None) -> bool:
    """PUT one card's changed variables if it is due and no other worker holds it; True if claimed."""
    now = now or timezone.now()
    if not sync.claim_card_message(pk, now):
        return False
    message = CardMessage.objects.select_related("bot", "ask__session").get(pk=pk)
    version = message.version  # read before computing: what is sent is at least this new
    if message.pushed is None:
        # createAndDeliver never succeeded: there is no card to update.
        CardMessage.objects.filter(pk=pk).update(synced_version=version, next_sync_at=None)
        return True
    assert message.ask is not None  # an ask's card (sync_due reads no other)
    desired = desired_variables(message.ask, message)
    changed = cards.changed_variables(message.pushed, desired)
    started = timezone.now()
    if changed:
        try:
            client_for(message.bot).update_card(message.message_id, changed)
        except DingTalkError as exc:
            _failed(message, exc, version, started)
            return True
    sync.card_pushed(pk, version=version, started=started, pushed={**message.pushed, **changed})
    if changed:
        logger.info("dingtalk card %s updated (%s)", message.message_id, ", ".join(sorted(changed)))
    return True


def _failed(message: CardMessage, exc: DingTalkError, version: int, started: datetime) -> None:
    # A QPS throttle says when to try again (its one-second window), exactly: no backoff on top.
    qps_limited = exc.code.startswith("Forbidden.AccessDenied.Q")
    sync.card_push_failed(
        message, str(exc), version=version, started=started, gave_up=exc.permanent,
        retry_after=exc.retry_after or 0, backoff=not qps_limited,
    )


# ------------------------------------------------------------------------- callback responses


# The public variables a click may change; the response carries their committed values.
STATE_KEYS = ("card_status", "question_desc", "form_btn_text", "selected_text", "selected_values")


def callback_response(outcome: Any) -> dict[str, Any]:
    """The callback's HTTP body (Stream: its ``response``), from the committed state alone.

    ``cardData`` (once the card has ended): its public terminal state — an ordinary card's answer,
    a finished collection, why a stale card is closed — so the clicker sees it at once; the
    card-sync lane's PUT follows for everyone else. ``userPrivateData`` (the clicker only): ``user_notice`` — why a
    click did not count, "" otherwise — and a targeted respondent's own submitted / cancelled
    view, which must never reach the shared card. ``outcome`` is a ``services.ClickResult``."""
    if outcome is None:
        return {}
    ask = outcome.ask
    message = CardMessage.objects.filter(ask_id=ask.pk, platform=Bot.Platform.DINGTALK).first()
    desired = desired_variables(ask, message or CardMessage(card_reason=""))
    private: dict[str, str] = {NOTICE: cards.notice(outcome.reason, outcome.notice)}
    respondent = outcome.respondent
    counted = outcome.kind in (cards.ClickKind.RECORDED, cards.ClickKind.DUPLICATE)
    if ask.target_type != Ask.Target.NONE and counted and respondent is not None:
        private.update(cards.respondent_view(respondent.status, submission_of(respondent)))
    reply: dict[str, Any] = {
        "cardUpdateOptions": {"updateCardDataByKey": True, "updatePrivateDataByKey": True},
        "userPrivateData": {"cardParamMap": private},
    }
    if not ask.is_open:
        # Only an ended card's state: it no longer changes, so replies arriving in any order agree
        # (a collection's k/N could go backwards if two replies crossed; the PUT lane sends it).
        reply["cardData"] = {"cardParamMap": {key: desired[key] for key in STATE_KEYS}}
    return reply


def find_ask(bot: Bot, out_track_id: str, question_id: str) -> Ask | None:
    """The ask a click belongs to: by outTrackId first, then by the question id (reference §6)."""
    if out_track_id:
        message = (
            CardMessage.objects.select_related("ask__session", "ask__agent")
            .filter(platform=Bot.Platform.DINGTALK, bot=bot, message_id=out_track_id, ask__isnull=False)
            .first()
        )
        if message is not None:
            return message.ask
    if question_id:
        return Ask.objects.select_related("session", "agent").filter(pk=question_id, session__bot=bot).first()
    return None
