"""Several worker processes at once never double-fire a deadline or double-deliver a webhook (SPEC §8).

40 asks are already past their deadline; three processes run ``Worker().step()`` in a loop from
one wall-clock instant against the same PostgreSQL database, delivering to a real HTTP receiver
on 127.0.0.1. Afterwards one more ``manage.py askcards_worker --once`` must find nothing to do.
"""
from __future__ import annotations

import json

import pytest

from tests.scale import harness
from tests.webhooks import signature_valid

pytestmark = pytest.mark.postgres

ASKS = 40
WORKERS = 3


@pytest.fixture(scope="module")
def receiver():
    receiver = harness.WebhookReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def workers_ran(pg_db, receiver):
    setup = harness.run_actor(
        pg_db, "setup", "--agent", "worker-agent", "--asks", str(ASKS), "--past", "--webhook-url", receiver.url
    )
    outputs = harness.run_actors_together(
        pg_db, [["work", "--max-seconds", "15", "--idle-steps", "4"] for _ in range(WORKERS)]
    )
    print("work done per process:", [(output["steps"], output["done"]) for output in outputs])
    once = harness.manage(pg_db, "askcards_worker", "--once")
    return setup, outputs, once


def test_workers_raise_nothing_and_finish(workers_ran):
    _, outputs, _ = workers_ran
    assert [(output["errors"], output["timed_out"]) for output in outputs] == [([], False)] * WORKERS


def test_workers_expire_each_ask_exactly_once(workers_ran, pg_db):
    setup, _, _ = workers_ran
    rows = pg_db.query(
        "SELECT a.status, a.reason, count(e.id) FROM askcards_ask a "
        "LEFT JOIN askcards_askevent e ON e.ask_id = a.id AND e.kind = 'closed' "
        "WHERE a.agent_id = %s GROUP BY a.id",
        setup["agent_id"],
    )
    assert sorted(rows) == [("expired", "timeout", 1)] * ASKS


def test_workers_do_not_audit_each_others_expiries_as_ignored(workers_ran, pg_db):
    """A worker that finds an ask claimed or closed by another worker moves on: "ignored" audit
    rows are for real attempts (clicks, cancels), not for workers sweeping the same deadline."""
    setup, _, _ = workers_ran
    assert pg_db.query(
        "SELECT count(*) FROM askcards_askevent WHERE kind = 'ignored' AND ask_id = ANY(%s)", setup["ask_ids"]
    ) == [(0,)]


def test_workers_deliver_each_event_to_the_webhook_exactly_once(workers_ran, pg_db, receiver):
    setup, _, _ = workers_ran
    expected = [f"evt_{setup['agent_id']}_{seq}" for seq in range(1, ASKS + 1)]
    received = sorted(hook.headers["webhook-id"] for hook in receiver.snapshot())
    assert received == sorted(expected)
    undelivered = pg_db.query(
        "SELECT seq, attempts, last_error FROM askcards_outboxevent "
        "WHERE agent_id = %s AND (delivered_at IS NULL OR delivered_via <> 'webhook')",
        setup["agent_id"],
    )
    assert undelivered == []
    assert pg_db.query("SELECT count(*) FROM askcards_outboxevent WHERE agent_id = %s", setup["agent_id"]) == [(ASKS,)]


def test_workers_sign_webhooks_with_the_agent_secret(workers_ran, receiver):
    setup, _, _ = workers_ran
    hooks = receiver.snapshot()
    assert hooks
    for hook in hooks:
        assert signature_valid(
            setup["webhook_secret"],
            hook.headers["webhook-id"],
            int(hook.headers["webhook-timestamp"]),
            hook.body,
            hook.headers["webhook-signature"],
        ), hook.headers["webhook-id"]
        assert not signature_valid(
            "whsec_" + "A" * 44, hook.headers["webhook-id"], int(hook.headers["webhook-timestamp"]), hook.body,
            hook.headers["webhook-signature"],
        )
    bodies = [json.loads(hook.body) for hook in hooks]
    assert all(body["type"] == "ask.closed" for body in bodies)
    assert all(any(ask_id in hook.body.decode() for hook in hooks) for ask_id in setup["ask_ids"])


def test_worker_run_after_the_others_finds_nothing_left(workers_ran, receiver):
    _, _, once = workers_ran
    assert once.strip() == "done: 0"
    assert len(receiver.snapshot()) == ASKS
