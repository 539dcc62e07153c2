"""`manage.py serve` end to end: one process serving the API and running the worker."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent

SEED = """
import json
from datetime import timedelta
from django.utils import timezone
from askcards import services
from askcards.models import Ask, Respondent
agent, key = services.agent_create(name="serve-test")
session, _ = services.session_upsert(agent=agent, key="web/alice", platform="web", web_user="alice")
# An ask whose deadline passed while no process was running.
ask = Ask.objects.create(agent=agent, session=session, tool="ask_user_questions", status="pending",
    questions=[{"question": "Q?", "header": "H", "options": [{"label": "a", "description": ""},
    {"label": "b", "description": ""}], "multiSelect": False}], surfaces=["web"],
    deadline=timezone.now() - timedelta(hours=1))
Respondent.objects.create(ask=ask, respondent_id="alice", respondent_key="alice")
print(json.dumps({"key": key, "ask": ask.id}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(ASKCARDS_DATA_DIR=str(tmp_path), ASKCARDS_SECRET_KEY="serve-test", PYTHONUNBUFFERED="1")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    seeded = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SEED], cwd=ROOT, env=env, check=True, timeout=60, capture_output=True, text=True
    )
    seed = json.loads(seeded.stdout.strip().splitlines()[-1])
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                requests.get(f"{base}/api/schema/", timeout=2)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        yield base, seed
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


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
