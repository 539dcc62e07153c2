"""The Feishu progress card (SPEC §6.1): a session's runs, their card, and its cancel button."""
from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from askcards import outbox
from askcards.errors import InvalidInput
from askcards.models import Ask, Bot, CardMessage, OutboxEvent, ProgressCard, Session

from .asks import SYSTEM, cancel_open_asks, close
from .grants import session_check_bot


def progress_put(
    *,
    session: Session,
    status: str,
    title: str | None = None,
    content: str | None = None,
    sender_id: str = "",
    detail_url: str | None = None,
    reply_to: str = "",
) -> ProgressCard:
    """The agent reports its task's progress on the session's Feishu card (SPEC §6.1).

    The first report of a run creates the card (sent by the worker's card sync), later ones
    schedule a re-render. A terminal status ends the run: the session's open asks are cancelled
    (``session_cancelled``) and the card renders without forms; the next ``running`` report starts
    a new card. While the person's cancel is pending, reports update the text but the card stays
    cancelled. ``None`` for title, content or detail_url keeps what the run's card shows.

    A new card is a new message to a person through the session's bot: BotNotGranted (and nothing
    written) when the bot is no longer granted to the agent. Reports on the card already made still
    update it (a revoke closes nothing already sent).
    """
    if session.platform != Session.Platform.FEISHU:
        raise InvalidInput(f"progress cards are Feishu cards; session {session.id} is a {session.platform} session")
    if session.bot is None or session.bot.platform != Bot.Platform.FEISHU:
        raise InvalidInput(f"session {session.id} has no Feishu bot: set bot (the app_id of a Feishu bot) on the session")
    if status not in ProgressCard.Status.values:
        raise InvalidInput(f"status must be one of {', '.join(ProgressCard.Status.values)}, got {status!r}")
    owner = sender_id or session.user_id
    if not owner and session.chat_type == Session.ChatType.GROUP:
        raise InvalidInput("a group session's progress card needs sender_id (the person whose message the task answers)")
    with transaction.atomic():
        card = ProgressCard.objects.select_for_update().runs_of(session.pk).first()
        if card is None or (card.status in ProgressCard.TERMINAL and status not in ProgressCard.TERMINAL):
            session_check_bot(agent=session.agent, session=session)
            card = ProgressCard.objects.create(
                session=session, status=status, title=title or "", content=content or "", sender_id=owner,
                detail_url=detail_url or "", reply_to=reply_to,
            )
            CardMessage.objects.create(
                platform=Bot.Platform.FEISHU, bot=session.bot, progress_card=card, message_id="", version=1
            )
        else:
            ended = status in ProgressCard.TERMINAL and card.status not in ProgressCard.TERMINAL
            card.status = status
            card.title = card.title if title is None else title
            card.content = card.content if content is None else content
            card.detail_url = card.detail_url if detail_url is None else detail_url
            card.sender_id = owner or card.sender_id
            card.save(update_fields=["status", "title", "content", "detail_url", "sender_id", "updated_at"])
            card_touch(card=card)
            if ended:
                cancel_open_asks(session, actor=f"agent:{session.agent.name}")
    return card


def session_cancel_request(*, card: ProgressCard, actor: str) -> bool:
    """The person pressed the card's cancel button: end the asks, tell the agent, show cancelled.

    False when the card already ended or was already cancelled (a repeated click changes nothing).
    """
    with transaction.atomic():
        now = timezone.now()
        if not ProgressCard.objects.filter(
            pk=card.pk, cancel_requested_at__isnull=True, status__in=[ProgressCard.Status.RUNNING, ProgressCard.Status.RECOVERING]
        ).update(cancel_requested_at=now):
            return False
        card.cancel_requested_at = now
        session = card.session
        cancel_open_asks(session, actor=actor)
        outbox.append(
            agent_id=session.agent_id,
            type=OutboxEvent.Type.SESSION_CANCEL_REQUESTED,
            session=session,
            data={"session": {"id": session.id, "key": session.key}, "by": actor},
        )
        card_touch(card=card)
    return True


def card_touch(*, card: ProgressCard) -> None:
    """The card's state changed: its message needs one more render (the worker's card sync)."""
    CardMessage.objects.filter(progress_card=card).update(version=F("version") + 1)


def card_delivery_failed(*, card_id: int, error: str) -> int:
    """The progress card could not be sent (the worker's card sync gave up on its first send):
    asks shown nowhere else fail with ``delivery_failed``."""
    asks = Ask.objects.filter(session__progress_cards=card_id, status__in=Ask.OPEN).select_related("session", "agent")
    return sum(
        close(ask, Ask.OPEN, Ask.Status.FAILED, Ask.Reason.DELIVERY_FAILED, SYSTEM, detail={"error": error[:300]})
        for ask in asks
        if ask.surfaces == ["feishu"]
    )


def progress_recovering(*, session: Session) -> None:
    """The agent restarted: the card of the interrupted run says "任务正在恢复执行", without forms."""
    with transaction.atomic():
        card = ProgressCard.objects.select_for_update().runs_of(session.pk).first()
        if card is not None and card.status == ProgressCard.Status.RUNNING:
            card.status = ProgressCard.Status.RECOVERING
            card.save(update_fields=["status", "updated_at"])
            card_touch(card=card)
