"""A long-poll in one process is woken by an answer committed in another, through Redis (SPEC §8).

``manage.py serve --no-worker`` runs with REDIS_URL; a client long-polls ``/asks/<id>/wait`` with
a 20 s timeout; once the poll is parked (its process subscribed to the ask's Redis channel), a separate
race_actor process answers. The poll must return the answered ask within seconds: without a wake
crossing processes it could only return at its timeout.
"""
from __future__ import annotations

import threading
import time

import pytest
import requests

from tests import serving
from tests.scale import harness

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

REDIS_DB = 11  # tests/scale/conftest.py: redis_url
POLL_TIMEOUT = 20  # seconds the server may hold the long-poll
WAKE_WITHIN = 5  # seconds from the answer to the poll's response


@pytest.fixture(scope="module")
def server(redis_env, tmp_path_factory):
    with serving.serve(redis_env, "--no-worker", "--no-migrate", log_dir=tmp_path_factory.mktemp("serve")) as base:
        yield base


def _wait_until_parked(ask_id: str, timeout: float = 10) -> None:
    """The long-poll's process has subscribed to the ask's channel in Redis (askcards.wake.bus)."""
    import redis

    client = redis.Redis(host=harness.REDIS_HOST, port=harness.REDIS_PORT, db=REDIS_DB, socket_timeout=2)
    channel = f"askcards:{REDIS_DB}:ask.{ask_id}"
    deadline = time.monotonic() + timeout
    try:
        while not client.pubsub_numsub(channel)[0][1]:
            assert time.monotonic() < deadline, f"the long-poll's process never subscribed to {channel}"
            time.sleep(0.05)
    finally:
        client.close()


def test_long_poll_is_woken_by_an_answer_from_another_process(pg_db, redis_env, server):
    setup = harness.run_actor(pg_db, "setup", "--agent", "waiter", "--asks", "1", env=redis_env)
    ask_id = setup["ask_ids"][0]
    result: dict = {}

    def long_poll() -> None:
        try:
            result["response"] = requests.get(
                f"{server}/api/v1/asks/{ask_id}/wait",
                params={"timeout": POLL_TIMEOUT},
                headers={"Authorization": f"Bearer {setup['key']}"},
                timeout=POLL_TIMEOUT + 10,
            )
        except Exception as exc:
            result["error"] = exc
        result["at"] = time.monotonic()

    poller = threading.Thread(target=long_poll, daemon=True)
    poller.start()
    _wait_until_parked(ask_id)
    time.sleep(0.5)  # past the poll's re-read after subscribing: only a wake can end it early now
    assert poller.is_alive(), f"the long-poll returned before the answer: {result}"

    answered_at = time.monotonic()
    outcome = harness.run_actor(
        pg_db, "act", "answer", "--surface", "web", "--label", "from-another-process", ask_id, env=redis_env
    )
    assert outcome["won"] == [ask_id]
    poller.join(timeout=POLL_TIMEOUT + 15)

    assert "error" not in result, result.get("error")
    response = result["response"]
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "answered"
    # The actor process itself takes ~1 s to start; the wake must come long before the 20 s timeout.
    assert result["at"] - answered_at < WAKE_WITHIN, f"woken after {result['at'] - answered_at:.1f} s"
    print(f"long-poll returned {result['at'] - answered_at:.2f} s after the answering process started")
