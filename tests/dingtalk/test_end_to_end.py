"""End to end over real HTTP on 127.0.0.1: the agent API and the callback view served by a live
server, DingTalk's OpenAPI by the fake DingTalk server, the worker stepping as it does in
production. create → card → signed callback → agent event."""
from __future__ import annotations

import json
from io import StringIO
import time
from datetime import timedelta

import pytest
import requests
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone

from askcards.models import Ask, CardMessage
from askcards.tools import dingtalk_ask_user_question as dt
from askcards.worker import Worker
from tests.conftest import grant_bot
from tests.fakes.dingtalk import signed_callback

from .integration import API_SECRET, FIELDS, QUESTIONS, make_bot

pytestmark = pytest.mark.django_db(transaction=True)
TIMEOUT = 10


@pytest.fixture
def world(live_server, fake, agent_and_key):
    bot = make_bot(fake, callback_mode="http")
    grant_bot(agent_and_key[0], bot)
    call_command("askcards_dingtalk_register", "--client-id", bot.app_id,
                 "--url", f"{live_server.url}/callbacks/dingtalk/{bot.app_id}/", stdout=StringIO())
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {agent_and_key[1]}"
    return {"base": live_server.url, "http": http, "bot": bot, "fake": fake}


def api(world, method: str, path: str, body=None):
    response = world["http"].request(method, world["base"] + "/api/v1" + path, json=body, timeout=TIMEOUT)
    assert response.status_code < 300, response.text
    return response.json()


def session(world, key: str, **fields):
    return api(world, "POST", "/sessions", {"key": key, "platform": "dingtalk", "bot": world["bot"].app_id, **fields})


def tool_call(world, session_id: str, arguments: dict, sender_id: str = ""):
    data = api(world, "POST", "/tools/call", {"session": session_id, "name": dt.NAME, "arguments": arguments,
                                             "sender_id": sender_id})
    return json.loads(data["tool_result"])


def press(world, details: dict, user_id: str, **payload):
    """What DingTalk POSTs when a person presses submit or cancel on the card."""
    fake = world["fake"]
    route = fake.routes[fake.cards[details["outTrackId"]].create_body["callbackRouteKey"]]
    headers, body = signed_callback(route["apiSecret"], out_track_id=details["outTrackId"], user_id=user_id,
                                    question_id=details["questionId"], **payload)
    response = requests.post(route["callbackUrl"], data=body, headers=headers, timeout=TIMEOUT)
    assert response.status_code == 200
    return response.json()


def settle() -> None:
    """Step the worker until every card is in sync (bounded)."""
    for _ in range(50):
        Worker().step()
        if not CardMessage.objects.filter(version__gt=F("synced_version")).exists():
            return
        time.sleep(0.05)
    raise AssertionError("cards did not sync")


def events(world) -> list[dict]:
    return api(world, "GET", "/events?after=0")["events"]


def test_ordinary_card_from_tool_call_to_agent_message(world):
    s = session(world, "dingtalk/dm/staff_a", chat_type="p2p", user_id="staff_a")
    assert [tool["name"] for tool in s["tools"]] == [dt.NAME]
    details = tool_call(world, s["id"], {"questions": QUESTIONS})
    assert details["status"] == "pending"
    card = world["fake"].cards[details["outTrackId"]]
    assert card.create_body["callbackType"] == "HTTP" and card.params["card_status"] == "pending"

    reply = press(world, details, "staff_a", form={"answer_0": "测试"})
    assert reply["cardData"]["cardParamMap"]["card_status"] == "submitted"
    settle()

    (event,) = events(world)
    assert event["type"] == "ask.closed"
    assert event["data"]["ask"]["result"]["message"] == (
        f"用户回答了交互卡片:\n- question_id: {details['questionId']}\n- question_title: 环境\n"
        "- status: submitted\n- answers:\n  - 环境: 测试"
    )
    assert world["fake"].card_params(details["outTrackId"])["question_desc"] == "已选择：测试。"


def test_group_collection_of_three_from_tool_call_to_agent_message(world):
    s = session(world, "dingtalk/dm/lead", chat_type="p2p", user_id="lead", user_name="组长")
    target = {"type": "group", "id": "cid_team", "respondentUserIds": ["staff_b", "staff_c", "staff_d"]}
    details = tool_call(world, s["id"], {"fields": FIELDS, "title": "午餐", "target": target, "timeoutMinutes": 10})
    assert details["timeoutMinutes"] == 10

    press(world, details, "staff_b", form={"dish": {"index": 1, "value": "b"}, "note": "不要辣"})
    press(world, details, "staff_c", cancel=True)
    settle()
    assert world["fake"].card_params(details["outTrackId"])["form_btn_text"] == "2/3"

    Ask.objects.filter(pk=details["questionId"]).update(deadline=timezone.now() - timedelta(seconds=1))
    Worker().step()  # the deadline fires
    settle()  # the card's update, paced at most 5 PUTs per second

    progress = [e["data"] for e in events(world) if e["type"] == "ask.progress"]
    assert [(p["received"], p["total"]) for p in progress] == [(1, 3), (2, 3)]
    (closed,) = [e for e in events(world) if e["type"] == "ask.closed"]
    result = closed["data"]["ask"]["result"]
    assert [(r["respondent_user_id"], r["status"]) for r in result["collection"]["responses"]] == [
        ("staff_b", "submitted"), ("staff_c", "cancelled"), ("staff_d", "missing")
    ]
    assert result["message"].startswith(dt.COLLECTION_PROMPT)
    assert '"answer": "不要辣"' in result["message"] and "EXTERNAL_UNTRUSTED_CONTENT" in result["message"]
    assert world["fake"].card_params(details["outTrackId"])["card_status"] == "expired"


def test_callback_is_answered_within_two_seconds_without_dingtalk(world):
    s = session(world, "dingtalk/dm/staff_a", chat_type="p2p", user_id="staff_a")
    details = tool_call(world, s["id"], {"questions": QUESTIONS})
    world["fake"].slow("*", 5.0, times=100)  # DingTalk is slow now: the callback must not wait on it
    started = timezone.now()
    press(world, details, "staff_a", form={"answer_0": "生产"})
    assert (timezone.now() - started).total_seconds() < 2
    assert Ask.objects.get(pk=details["questionId"]).status == "answered"


def test_no_secret_or_token_reaches_the_logs(world, caplog):
    caplog.set_level("DEBUG")
    s = session(world, "dingtalk/dm/staff_a", chat_type="p2p", user_id="staff_a")
    details = tool_call(world, s["id"], {"questions": QUESTIONS})
    press(world, details, "staff_b", form={"answer_0": "测试"})
    press(world, details, "staff_a", form={"answer_0": "测试"})
    settle()
    tokens = world["fake"].tokens
    logged = caplog.text
    assert tokens and not any(token in logged for token in tokens)
    assert API_SECRET not in logged and world["fake"].client_secret not in logged
