"""Pruning on PostgreSQL, at size, while asks keep ending and callbacks keep arriving
(tests.services.pg_prune): old audit rows, delivered events and expired callback receipts go in
short batches, nothing a person's answer, a click's receipt or an agent's event needs waits on
them, and nothing unsafe is dropped."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres

TRANSITIONS = 40
RECEIPTS = 60_000  # over the last two days: half of them older than CALLBACK_RECEIPT_TTL (a day)


@pytest.fixture(scope="module")
def pruned(tmp_path_factory, pg_template):
    from tests.largedb import seeded_database

    # 60,000 closed asks over 120 days: those of the first 30 days are past the audit retention
    # (90 days), those of the first 90 past the events' (30 days).
    with seeded_database(tmp_path_factory.mktemp("askcards-data"), pg_template, closed=60_000, pending=2_000,
                         sessions=500) as database:
        report = database.run("tests.services.pg_prune", "--transitions", str(TRANSITIONS), "--batch", "1000",
                              "--receipts", str(RECEIPTS))
    print({key: value for key, value in report.items() if key != "transitions"})
    yield report


def test_pruning_deletes_the_old_rows_in_batches(pruned):
    assert pruned["error"] is None
    # About a quarter of the 181,200 audit rows, three quarters of the 60,000 events (every one
    # of them delivered or given up).
    assert 40_000 < pruned["deleted"]["audit"] < 50_000
    assert 43_000 < pruned["deleted"]["outbox"] < 47_000
    assert pruned["batches"] >= sum(pruned["deleted"].values()) // 1000


def test_pruning_leaves_nothing_old_and_safe_behind(pruned):
    assert pruned["left"]["old_audit_of_closed"] == 0


def test_pruning_keeps_every_undelivered_event(pruned):
    # The transitions' own events (their agent has a webhook, not yet delivered here).
    ended = sum(transition["ended"] for transition in pruned["transitions"])
    assert pruned["left"]["undelivered_events"] == ended > 0


def test_pruning_drops_the_expired_receipts_and_keeps_the_rest(pruned):
    before = pruned["receipts_before"]
    assert (before["all"], before["old"]) == (RECEIPTS, RECEIPTS // 2)
    assert pruned["deleted"]["receipts"] == RECEIPTS // 2
    assert pruned["left"]["old_receipts"] == 0
    recorded = sum(transition["recorded"] for transition in pruned["transitions"])
    assert pruned["left"]["receipts"] == RECEIPTS - pruned["deleted"]["receipts"] + recorded


def test_asks_end_and_receipts_are_recorded_promptly_while_pruning_runs(pruned):
    during = [transition for transition in pruned["transitions"] if transition["during_prune"]]
    assert len(during) >= 10, pruned["transitions"]  # they overlapped the pruning
    assert all(transition["ended"] and transition["recorded"] for transition in during)
    slowest = max(transition["seconds"] for transition in during)
    assert slowest < 0.5, f"an ask's ending took {slowest:.3f} s while pruning ran"
    slowest = max(transition["receipt_seconds"] for transition in during)
    assert slowest < 0.5, f"a callback receipt took {slowest:.3f} s while pruning ran"


def test_a_prune_batch_is_short(pruned):
    assert pruned["slowest_pass_seconds_per_batch"] < 0.5
