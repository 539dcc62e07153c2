"""Platform callback views. Thin: verify → the surface parses → services → reply.

Feishu (SPEC §6.1): every handled click is answered with HTTP 200 and
``{toast, card: {type: "raw", data: <the whole card>}}`` rendered from the committed state; no
Feishu API is called on this path (the group's copy is PATCHed by the worker afterwards).
"""
from __future__ import annotations

import logging
from functools import partial

from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from askcards import edge, metrics, selectors, services
from askcards.db import in_pool
from askcards.errors import CallbackRefused
from askcards.models import Ask, Bot, ProgressCard
from askcards.surfaces.dingtalk import handler as dingtalk_handler
from askcards.surfaces.feishu import cards as feishu_cards
from askcards.surfaces.feishu import parse as feishu_parse
from askcards.surfaces.feishu import security as feishu_security
from askcards.surfaces.feishu import surface as feishu

logger = logging.getLogger(__name__)


def _view(handle):
    """The Django view of a callback handler ``handle(ref, headers, raw_body) -> (status, body)``
    (``headers`` a case-insensitive mapping).

    The work runs on the shared thread pool (connections kept per thread), not on a thread
    started for this one request."""

    @csrf_exempt
    @require_POST
    async def view(request, **kwargs):
        (ref,) = kwargs.values()  # the app id / client id in the URL
        status, body = await in_pool(handle, ref, request.headers, request.body)
        return JsonResponse(body, status=status)

    return view


MAX_CALLBACK_BYTES = 1024 * 1024  # Feishu callbacks are a few KB


class CallbackApp:
    """The ASGI route ``serve`` and daphne use for platform callbacks: the same handler as the
    Django view, without the session, auth, CSRF and message middleware that a platform's
    machine-to-machine POST never uses (each costs a thread hop per request on an async view).
    ``project/asgi.py`` routes ``/callbacks/…`` here; the Django URLconf keeps the view for WSGI
    servers and the test client."""

    def __init__(self, handle):
        self.handle = handle

    async def __call__(self, scope, receive, send):
        # Served without Django's handler: askcards.edge does its edge work (Host, security
        # headers, a bounded body). Platforms sign their bodies, so there is nothing to
        # authenticate before reading; the limit is small instead.
        try:
            request = edge.request_for(scope)
            if scope["method"] != "POST":
                response = edge.error_response(405, "method_not_allowed", "Callbacks are POSTed.")
                response["Allow"] = "POST"
                await edge.send_response(send, response, request)
                return
            body = await edge.read_body(scope, receive, MAX_CALLBACK_BYTES)
        except edge.Refused as refused:
            await edge.refuse(scope, send, refused)
            return
        if body is None:  # the platform went away
            return
        (ref,) = scope["url_route"]["kwargs"].values()  # the app id / client id in the URL
        # request.headers is case-insensitive, like the Django view's: handlers just .get() a name.
        status, data = await in_pool(self.handle, ref, request.headers, body)
        response = JsonResponse(data, status=status, json_dumps_params={"ensure_ascii": False, "separators": (",", ":")})
        await edge.send_response(send, response, request)


@metrics.callback_timer("feishu")
def feishu_handle(app_id: str, headers, raw_body: bytes) -> tuple[int, dict]:
    try:
        bot = selectors.callback_bot(platform=Bot.Platform.FEISHU, app_id=app_id)
    except CallbackRefused as refused:
        metrics.callback_refused("feishu", refused.cause)
        return refused.status, {"error": refused.message}
    try:
        payload = feishu_security.open_callback(
            headers, raw_body, encrypt_key=bot.encrypt_key, verification_token=bot.verification_token
        )
    except feishu_security.MalformedBody as exc:
        logger.warning("feishu callback for app %s unreadable: %s", app_id, exc)
        metrics.callback_refused("feishu", "malformed")
        return 400, {"error": str(exc)}
    except feishu_security.CallbackRejected as exc:
        logger.warning("feishu callback for app %s rejected: %s", app_id, exc)
        metrics.callback_refused("feishu", "verification")
        return 401, {"error": str(exc)}
    if payload.get("type") == "url_verification":
        return 200, {"challenge": payload.get("challenge", "")}
    try:
        action = feishu_parse.parse_card_action(payload)
    except feishu_parse.NotACardAction:
        return 200, {}
    except feishu_parse.MalformedCallback as exc:
        logger.warning("feishu callback for app %s malformed: %s", app_id, exc)
        metrics.callback_refused("feishu", "malformed")
        return 400, {"error": str(exc)}
    handlers = {(feishu_cards.ASK_KIND, "submit"): _ask_submit, (feishu_cards.PROGRESS_KIND, "cancel"): _progress_cancel}
    handler = handlers.get((action.kind, action.act))
    # One write transaction: the event's receipt commits with the state change it caused, so a
    # re-delivery is refused exactly when the first delivery took effect.
    with transaction.atomic():
        if action.event_id and not services.callback_receipt(platform=Bot.Platform.FEISHU, event_id=action.event_id):
            logger.info("feishu callback event %s was already handled", action.event_id)
            return 200, {}
        if handler is None:
            return 200, {}
        toast_type, text, card = handler(bot, action)
    # Rendered from the committed state, after the transaction (no lock held while rendering).
    return 200, feishu_cards.callback_response(toast_type, text, feishu.render(card).card if card is not None else None)


def _clicked_card(bot: Bot, action, session=None) -> ProgressCard | None:
    """The card the click came from: by its message, else the session's latest card.
    ``session``, when the caller has it loaded, saves reading it again for the render."""
    cards = ProgressCard.objects if session is not None else ProgressCard.objects.select_related("session")
    card = None
    if action.message_id:
        card = selectors.unique_row(cards.filter(
            card_messages__platform=Bot.Platform.FEISHU, card_messages__bot=bot, card_messages__message_id=action.message_id
        ))
    if card is None:
        card = cards.runs_of(action.session_id).filter(session__bot=bot).first()
    if card is not None and session is not None:
        if card.session_id != session.id:
            return _clicked_card(bot, action)  # a forged mix of ids: read the card's own session
        card.session = session
    return card


def _ask_submit(bot: Bot, action) -> tuple[str, str, ProgressCard | None]:
    ask, card = selectors.clicked_ask(bot, action.ask_id, action.message_id)
    if ask is None:
        return "info", feishu_cards.TOAST_STALE, _clicked_card(bot, action)
    if card is None or card.session_id != ask.session_id:
        card = _clicked_card(bot, action, ask.session)  # no message id, or a forged mix of ids
    else:
        card.session = ask.session

    def rejected(why: str, toast_type: str, text: str) -> tuple[str, str, ProgressCard | None]:
        services.ask_click_rejected(ask=ask, why=why, actor=f"respondent:{action.operator}", surface=feishu.NAME)
        return toast_type, text, card

    if ask.status != Ask.Status.PENDING:
        return rejected("late", "info", feishu_cards.TOAST_STALE)
    if action.operator.casefold() != ask.sender_id.casefold():
        return rejected("not_sender", "error", feishu_cards.TOAST_NOT_SENDER)
    try:
        answers = feishu_parse.form_answers(ask.questions or [], action.form_value, action.form_index)
    except feishu_parse.IncompleteAnswer:
        return rejected("blank", "warning", feishu_cards.TOAST_BLANK)
    except feishu_parse.MalformedCallback as exc:
        logger.warning("feishu submit for ask %s has values no form produces: %s", ask.id, exc)
        return rejected("malformed", "info", feishu_cards.TOAST_STALE)
    outcome = services.ask_answer(ask_id=ask.id, ask=ask, answers=answers, surface=feishu.NAME, respondent_id=action.operator)
    if outcome.notice:  # a value the form's rules refuse (an agent host's elicitation): say which
        return "warning", feishu_cards.TOAST_REFUSED.format(why=outcome.notice), card
    if not outcome.accepted:
        return "info", feishu_cards.TOAST_STALE, card
    return "success", feishu_cards.TOAST_SUBMITTED, card


def _progress_cancel(bot: Bot, action) -> tuple[str, str, ProgressCard | None]:
    card = _clicked_card(bot, action)
    if card is None:
        return "info", feishu_cards.TOAST_STALE, None
    if action.operator.casefold() != (card.sender_id or card.session.user_id).casefold():
        return "error", feishu_cards.TOAST_NOT_SENDER, card
    if not services.session_cancel_request(card=card, actor=f"respondent:{action.operator}"):
        return "info", feishu_cards.TOAST_STALE, card
    card.refresh_from_db()
    return "success", feishu_cards.TOAST_CANCELLED, card


# ------------------------------------------------------------------------------------ DingTalk
# The HTTP and Stream handler is DingTalk's own (surfaces/dingtalk/handler.py); the click's effect
# is the service it is given.

dingtalk_handle = metrics.callback_timer("dingtalk")(
    partial(dingtalk_handler.http_callback, effect=services.dingtalk_callback)
)

feishu_callback = _view(feishu_handle)
dingtalk_callback = _view(dingtalk_handle)
