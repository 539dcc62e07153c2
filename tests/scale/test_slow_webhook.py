"""A slow webhook receiver makes one worker's batch outlast its claim; the events it has not
reached yet must still be delivered once, not by it *and* by the worker that claims them next.

The claim window (60 s) and webhook timeout (10 s) are shrunk in the worker processes (2 s and
1 s) and the receiver takes 0.4 s per request, so a batch of 12 outlasts its claim after ~5
deliveries, as a batch of 20 against an endpoint that times out would in production.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.scale import harness

pytestmark = pytest.mark.postgres

ASKS = 12
WORKERS = 3


@pytest.fixture(scope="module")
def slow_receiver():
    receiver = harness.WebhookReceiver(delay=0.4).start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def workers_ran(pg_db, slow_receiver):
    setup = harness.run_actor(
        pg_db, "setup", "--agent", "slow-agent", "--asks", str(ASKS), "--past", "--webhook-url", slow_receiver.url
    )
    work = ["work", "--max-seconds", "20", "--idle-steps", "12", "--claim-seconds", "2", "--webhook-timeout", "1"]
    outputs = harness.run_actors_together(pg_db, [work for _ in range(WORKERS)])
    print("work per process:", [(o["steps"], o["done"]) for o in outputs])
    return setup, outputs


def test_slow_webhook_workers_finish(workers_ran):
    _, outputs = workers_ran
    assert [(output["errors"], output["timed_out"]) for output in outputs] == [([], False)] * WORKERS


def test_slow_webhook_batch_outlasts_its_claim(workers_ran):
    """The scenario happened: some event was claimed again after its first claim lapsed
    (work done = 12 expiries + every claim)."""
    _, outputs = workers_ran
    assert sum(output["done"] for output in outputs) > 2 * ASKS


def test_slow_webhook_events_are_delivered_exactly_once(workers_ran, pg_db, slow_receiver):
    setup, _ = workers_ran
    counts = Counter(hook.headers["webhook-id"] for hook in slow_receiver.snapshot())
    assert counts == Counter(f"evt_{setup['agent_id']}_{seq}" for seq in range(1, ASKS + 1))
    assert pg_db.query(
        "SELECT count(*) FROM askcards_outboxevent WHERE agent_id = %s AND delivered_at IS NOT NULL",
        setup["agent_id"],
    ) == [(ASKS,)]
