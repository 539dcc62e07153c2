"""A targeted collection survives a restart of askcards (two ``manage.py serve`` processes one
after the other on the same database) and of the agent (``POST /api/v1/recover``): every
response, before and after, is in its one result."""
from __future__ import annotations

import json
import time

import pytest
import requests

from askcards.tools import dingtalk_ask_user_question as dt
from tests import serving
from tests.fakes.dingtalk import FakeDingTalk, signed_callback

from .integration import API_SECRET, FIELDS

SEED = """
import json
from askcards import services
bot = services.bot_add(platform="dingtalk", app_id="{client_id}", app_secret="{client_secret}",
    base_url="{base_url}", api_secret="{api_secret}", callback_mode="stream")
agent, key = services.agent_create(name="dt-restart", bots=[bot])
session, _ = services.session_upsert(agent=agent, key="dingtalk/dm/lead", platform="dingtalk", bot=bot,
    chat_type="p2p", user_id="lead")
print(json.dumps({{"key": key, "session": session.id}}))
"""
TARGET = {"type": "group", "id": "cid_team", "respondentUserIds": ["staff_b", "staff_c", "staff_d"]}


@pytest.fixture
def fake():
    with FakeDingTalk() as server:
        yield server


def press(base: str, fake, details: dict, user_id: str, note: str) -> None:
    headers, body = signed_callback(API_SECRET, out_track_id=details["outTrackId"], user_id=user_id,
                                    question_id=details["questionId"], form={"note": note})
    response = requests.post(f"{base}/callbacks/dingtalk/{fake.client_id}/", data=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text


def test_collection_survives_askcards_and_agent_restarts(tmp_path, fake):
    env = serving.service_env(tmp_path)
    serving.manage(env, "migrate", "-v0")
    seed = serving.shell_json(env, SEED.format(client_id=fake.client_id, client_secret=fake.client_secret,
                                               base_url=fake.base_url, api_secret=API_SECRET))
    auth = {"Authorization": f"Bearer {seed['key']}"}
    arguments = {"fields": FIELDS, "title": "午餐", "target": TARGET, "timeoutMinutes": 30}

    with serving.serve(env) as base:
        call = {"session": seed["session"], "name": dt.NAME, "arguments": arguments}
        created = requests.post(f"{base}/api/v1/tools/call", json=call, headers=auth, timeout=10).json()
        details = json.loads(created["tool_result"])
        assert details["status"] == "pending"
        press(base, fake, details, "staff_b", "第一位")

    with serving.serve(env) as base:
        assert requests.post(f"{base}/api/v1/recover", json={}, headers=auth, timeout=10).json() == {"invalidated": 0}
        press(base, fake, details, "staff_c", "第二位")
        press(base, fake, details, "staff_d", "第三位")
        ask = None
        for _ in range(50):  # bounded: 10 s
            ask = requests.get(f"{base}/api/v1/asks/{details['questionId']}", headers=auth, timeout=10).json()
            if ask["status"] != "pending":
                break
            time.sleep(0.2)
        for _ in range(50):  # the worker inside serve PUTs the final card
            if fake.card_params(details["outTrackId"])["form_btn_text"] == "已结束":
                break
            time.sleep(0.2)

    assert (ask["status"], ask["reason"]) == ("answered", "completed")
    answers = [r["answers"] for r in ask["result"]["collection"]["responses"]]
    assert answers == [[{"question": "备注", "answer": note}] for note in ("第一位", "第二位", "第三位")]
    assert fake.card_params(details["outTrackId"])["form_btn_text"] == "已结束"
