"""Clicks on Feishu cards: a form submitted on an ask, the progress card's cancel button.

The effect of one verified callback (``surfaces/feishu/handler.py`` verifies and parses it), in one
transaction: the event's receipt commits with the state change it caused, so a re-delivery is
refused exactly when the first delivery took effect. Each rule is checked once, here, with one
audit name per rejected click: ``late`` (the ask ended), ``not_sender`` (only the message's sender
answers), ``blank`` (a question without a selection or text), ``malformed`` (values no form
produces), ``invalid`` (the form's own rules, from the tool).
"""
from __future__ import annotations

import logging

from django.db import transaction

from askcards import selectors
from askcards.models import Ask, Bot
from askcards.surfaces.feishu import cards as feishu_cards
from askcards.surfaces.feishu import parse as feishu_parse
from askcards.surfaces.feishu.handler import Click, Outcome
from askcards.surfaces.feishu.surface import NAME as FEISHU_SURFACE

from .asks import ask_answer, ask_click_rejected
from .feishu_progress import session_cancel_request
from .sessions import callback_receipt

logger = logging.getLogger(__name__)


def feishu_callback(*, bot: Bot, action: feishu_parse.CardAction) -> Click | None:
    """What one verified Feishu card action does; None when it shows nothing (a re-delivered
    event, or an action that is neither an ask's submit nor a progress card's cancel)."""
    with transaction.atomic():
        if action.event_id and not callback_receipt(platform=Bot.Platform.FEISHU, event_id=action.event_id):
            logger.info("feishu callback event %s was already handled", action.event_id)
            return None
        if (action.kind, action.act) == (feishu_cards.ASK_KIND, "submit"):
            return _ask_submit(bot, action)
        if (action.kind, action.act) == (feishu_cards.PROGRESS_KIND, "cancel"):
            return _progress_cancel(bot, action)
        return None


def _ask_submit(bot: Bot, action: feishu_parse.CardAction) -> Click:
    ask, card = selectors.clicked_ask(bot, action.ask_id, action.message_id)
    if ask is None:
        return Click(Outcome.STALE, selectors.clicked_progress_card(bot, action.message_id, action.session_id))
    if card is None or card.session_id != ask.session_id:  # no message id, or a forged mix of ids
        card = selectors.clicked_progress_card(bot, action.message_id, action.session_id, session=ask.session)
    else:
        card.session = ask.session

    def rejected(why: str, outcome: Outcome) -> Click:
        ask_click_rejected(ask=ask, why=why, actor=f"respondent:{action.operator}", surface=FEISHU_SURFACE)
        return Click(outcome, card)

    if ask.status != Ask.Status.PENDING:
        return rejected("late", Outcome.STALE)
    if action.operator.casefold() != ask.sender_id.casefold():
        return rejected("not_sender", Outcome.NOT_SENDER)
    try:
        answers = feishu_parse.form_answers(ask.questions or [], action.form_value, action.form_index)
    except feishu_parse.IncompleteAnswer:
        return rejected("blank", Outcome.BLANK)
    except feishu_parse.MalformedCallback as exc:
        logger.warning("feishu submit for ask %s has values no form produces: %s", ask.id, exc)
        return rejected("malformed", Outcome.STALE)
    # The sender was checked above: the answer is theirs (no second owner check in ask_answer).
    outcome = ask_answer(ask_id=ask.id, ask=ask, answers=answers, surface=FEISHU_SURFACE)
    if outcome.notice:  # a value the form's rules refuse (an agent host's elicitation): say which
        return Click(Outcome.REFUSED, card, outcome.notice)
    return Click(Outcome.SUBMITTED if outcome.accepted else Outcome.STALE, card)


def _progress_cancel(bot: Bot, action: feishu_parse.CardAction) -> Click:
    card = selectors.clicked_progress_card(bot, action.message_id, action.session_id)
    if card is None:
        return Click(Outcome.STALE, None)
    if action.operator.casefold() != (card.sender_id or card.session.user_id).casefold():
        return Click(Outcome.NOT_SENDER, card)
    if not session_cancel_request(card=card, actor=f"respondent:{action.operator}"):
        return Click(Outcome.STALE, card)
    card.refresh_from_db()
    return Click(Outcome.CANCELLED, card)

