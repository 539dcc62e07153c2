"""Feishu end to end through real processes: ``serve`` (API, callback view and worker in one
process) talking to the fake Feishu OpenAPI (real HTTP on 127.0.0.1, strict about cards).

The agent reports progress and asks, waiting in a long-poll; the worker sends the card; the person
submits the form (a signed, encrypted ``card.action.trigger`` to the callback view); the agent's
wait returns the answer; the worker's PATCH brings the group's card to what the clicker sees.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
import requests

from tests import serving
from tests.fakes.feishu import FakeFeishu
from tests.feishu.helpers import forms
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN, signed_callback

QUESTIONS = [
    {"question": "Ship on Friday?", "header": "Release", "options": [{"label": "Yes"}, {"label": "No", "description": "Wait a week"}]},
    {"question": "Which channels?", "header": "Notify", "multiSelect": True, "options": [{"label": "Email"}, {"label": "Feishu"}]},
]
WAIT_SECONDS = 20  # every wait below is bounded



@pytest.fixture
def served_with_fake(tmp_path):
    with FakeFeishu() as fake:
        env = serving.service_env(tmp_path)
        serving.manage(env, "migrate", "-v0")
        key = json.loads(serving.manage(env, "askcards_agent", "create", "e2e", "--json"))["key"]
        serving.manage(
            env, "askcards_bot", "add", "feishu", "--app-id", fake.app_id, "--app-secret", fake.app_secret,
            "--verification-token", VERIFICATION_TOKEN, "--encrypt-key", ENCRYPT_KEY, "--base-url", fake.base_url,
        )
        serving.manage(env, "askcards_agent", "grant", "e2e", "--bot", fake.app_id)  # an operator's grant
        with serving.serve(env) as base:
            yield base, {"Authorization": f"Bearer {key}"}, fake


def test_feishu_ask_answered_on_the_card_reaches_the_agent(served_with_fake):
    base, headers, fake = served_with_fake
    session = requests.post(
        f"{base}/api/v1/sessions", json={"key": f"feishu-{fake.app_id}-private-ou_alice", "bot": fake.app_id}, headers=headers, timeout=10
    ).json()
    assert session["platform"] == "feishu" and [t["name"] for t in session["tools"]] == ["ask_user_questions"]
    progress = requests.put(
        f"{base}/api/v1/sessions/{session['id']}/progress", json={"status": "running", "title": "Release 2.0", "content": "Tests are green"},
        headers=headers, timeout=10,
    )
    assert progress.status_code == 200, progress.text
    message = serving.until(lambda: next(iter(fake.messages.values()), None), "the progress card to be sent")
    assert message.receive_id == "ou_alice"

    waited: dict = {}
    call = {"session": session["id"], "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "wait": WAIT_SECONDS + 10}
    agent = threading.Thread(target=lambda: waited.update(requests.post(f"{base}/api/v1/tools/call", json=call, headers=headers, timeout=60).json()))
    agent.start()
    card = serving.until(lambda: forms(message.card) and message.card, "the form to be PATCHed onto the card")
    submit = next(e for e in forms(card)[0]["elements"] if e["tag"] == "button")
    value = submit["behaviors"][0]["value"]

    body, callback_headers = signed_callback(
        fake.app_id, operator="ou_alice", value=value, message_id=message.message_id,
        form_value={"q0_0": "1", "c0_0": "", "q0_1": ["0", "1"], "c0_1": "and the wiki"},
    )
    started = time.monotonic()
    response = requests.post(f"{base}/callbacks/feishu/{fake.app_id}/", data=body, headers={**callback_headers, "Content-Type": "application/json"}, timeout=5)
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and elapsed < 3  # Feishu gives up after 3 s
    reply = response.json()
    assert reply["toast"] == {"type": "success", "content": "已提交"} and forms(reply["card"]["data"]) == []

    agent.join(timeout=30)
    assert not agent.is_alive()
    assert waited["status"] == "answered"
    assert json.loads(waited["tool_result"]) == {"answers": [
        {"question": "Ship on Friday?", "selectedLabels": ["No"], "customInput": None},
        {"question": "Which channels?", "selectedLabels": ["Email", "Feishu"], "customInput": "and the wiki"},
    ]}
    # The group's copy (it still had the form) converges on the clicker's card: the worker
    # PATCHes after the response, never on the callback's path.
    serving.until(lambda: message.card == reply["card"]["data"], "the group card to converge")
    assert not fake.rejections
