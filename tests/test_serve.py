"""`manage.py serve` end to end: one process serving the API and running the worker."""
import time

import pytest
import requests

from tests import serving

SEED = """
import json
from datetime import timedelta
from django.utils import timezone
from django.contrib.auth import get_user_model
from askcards import services
from askcards.models import Ask, Respondent
get_user_model().objects.create_user("alice")
agent, key = services.agent_create(name="serve-test", web_users=["alice"])
session, _ = services.session_upsert(agent=agent, key="web/alice", platform="web", web_user="alice")
# An ask whose deadline passed while no process was running.
ask = Ask.objects.create(agent=agent, session=session, tool="ask_user_questions", status="pending",
    questions=[{"question": "Q?", "header": "H", "options": [{"label": "a", "description": ""},
    {"label": "b", "description": ""}], "multiSelect": False}], surfaces=["web"],
    deadline=timezone.now() - timedelta(hours=1))
Respondent.objects.create(ask=ask, respondent_id="alice", respondent_key="alice")
print(json.dumps({"key": key, "ask": ask.id}))
"""


@pytest.fixture
def served(tmp_path):
    with serving.seeded(tmp_path, SEED) as (base, seed):
        yield base, seed


def test_serve_fires_deadline_that_passed_while_down(served):
    base, seed = served
    headers = {"Authorization": f"Bearer {seed['key']}"}
    status = None
    for _ in range(50):  # bounded: 10 s
        status = requests.get(f"{base}/api/v1/asks/{seed['ask']}", headers=headers, timeout=5).json()["status"]
        if status != "pending":
            break
        time.sleep(0.2)
    assert status == "expired"
    events = requests.get(f"{base}/api/v1/events?after=0", headers=headers, timeout=5).json()["events"]
    assert [(e["type"], e["data"]["ask"]["reason"]) for e in events] == [("ask.closed", "timeout")]


def test_serve_answers_api_and_docs(served):
    base, _ = served
    assert requests.get(f"{base}/api/docs/", timeout=5).status_code == 200
    schema = requests.get(f"{base}/api/schema/", timeout=5, headers={"Accept": "application/json"})
    assert "/api/v1/tools/call" in schema.text
