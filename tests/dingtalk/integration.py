"""Shared set-up for the DingTalk integration tests: a bot pointed at the fake DingTalk server,
a DingTalk session, signed callbacks through the real view, and the worker's card-sync lane."""
from __future__ import annotations

import json

from django.test import Client
from django.utils import timezone

from askcards import services
from askcards.models import Ask, Bot, CardMessage
from askcards.surfaces.base import SyncReport
from askcards.surfaces.dingtalk.surface import DingTalkSurface
from tests.fakes.dingtalk import signed_callback
from tests.conftest import grant_bot

API_SECRET = "callback-api-secret"
TOOL = "dingtalk_ask_user_question"
QUESTIONS = [
    {"question": "部署到哪个环境？", "header": "环境", "options": [{"label": "测试"}, {"label": "生产"}]},
]
FIELDS = [
    {"name": "dish", "label": "午餐", "type": "SELECT",
     "options": [{"value": "a", "text": "餐品甲"}, {"value": "b", "text": "餐品乙"}]},
    {"name": "note", "label": "备注", "type": "TEXT"},
]


def make_bot(fake, *, callback_mode: str = "stream") -> Bot:
    return services.bot_add(
        platform="dingtalk", app_id=fake.client_id, app_secret=fake.client_secret, base_url=fake.base_url,
        api_secret=API_SECRET, callback_mode=callback_mode,
    )


def make_session(agent, bot, *, key: str = "dingtalk/dm/staff_a", chat_type: str = "p2p", user_id: str = "staff_a",
                 chat_id: str = ""):
    grant_bot(agent, bot)
    session, _ = services.session_upsert(
        agent=agent, key=key, platform="dingtalk", bot=bot, chat_type=chat_type, user_id=user_id, chat_id=chat_id,
        user_name="成员甲",
    )
    return session


def create(agent, session, arguments: dict, *, sender_id: str = "", call_id: str | None = None):
    outcome = services.tool_call(agent=agent, session=session, name=TOOL, arguments=arguments, sender_id=sender_id,
                                 call_id=call_id)
    details = json.loads(outcome.tool_result) if outcome.tool_result else None
    return outcome, details


def out_track_id(ask: Ask) -> str:
    return CardMessage.objects.get(ask=ask).message_id


def click(bot: Bot, ask: Ask, user_id: str, *, form=None, cancel=False, shape="content", question_id=None,
          out_track=None, timestamp_ms=None, secret=API_SECRET):
    headers, body = signed_callback(
        secret, timestamp_ms=timestamp_ms, out_track_id=out_track if out_track is not None else out_track_id(ask),
        user_id=user_id, question_id=question_id if question_id is not None else ask.id, form=form, cancel=cancel,
        shape=shape,
    )
    return Client().post(f"/callbacks/dingtalk/{bot.app_id}/", data=body, content_type="application/json",
                         headers={k: v for k, v in headers.items() if k != "Content-Type"})


def private_view(response) -> dict:
    return response.json()["userPrivateData"]["cardParamMap"]


def public_view(response) -> dict:
    return response.json()["cardData"]["cardParamMap"]


def sync_cards() -> int:
    """Run the card-sync lane until nothing is due (bounded)."""
    done = 0
    for _ in range(10):
        CardMessage.objects.update(next_sync_at=None)
        step = DingTalkSurface().sync_due(timezone.now(), SyncReport())
        if not step:
            break
        done += step
    return done
