"""Pruning on PostgreSQL, at size, while asks keep ending (tests.services.pg_prune): old audit rows
and delivered events go in short batches, nothing a person's answer or an agent's event needs
waits on them, and nothing unsafe is dropped."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres

TRANSITIONS = 40


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    from tests.largedb import seeded_database

    # 60,000 closed asks over 120 days: those of the first 30 days are past the audit retention
    # (90 days), those of the first 90 past the events' (30 days).
    with seeded_database(tmp_path_factory.mktemp("askcards-data"), closed=60_000, pending=2_000,
                         sessions=500) as database:
        report = database.run("tests.services.pg_prune", "--transitions", str(TRANSITIONS), "--batch", "1000")
    print({key: value for key, value in report.items() if key != "transitions"})
    yield report


def test_pruning_deletes_the_old_rows_in_batches(pruned):
    assert pruned["error"] is None
    # About a quarter of the 181,200 audit rows, three quarters of the 60,000 events (every one
    # of them delivered or given up).
    assert 40_000 < pruned["deleted"]["audit"] < 50_000
    assert 43_000 < pruned["deleted"]["outbox"] < 47_000
    assert pruned["batches"] >= (pruned["deleted"]["audit"] + pruned["deleted"]["outbox"]) // 1000


def test_pruning_leaves_nothing_old_and_safe_behind(pruned):
    assert pruned["left"]["old_audit_of_closed"] == 0


def test_pruning_keeps_every_undelivered_event(pruned):
    # The transitions' own events (their agent has a webhook, not yet delivered here).
    ended = sum(transition["ended"] for transition in pruned["transitions"])
    assert pruned["left"]["undelivered_events"] == ended > 0


def test_asks_end_promptly_while_pruning_runs(pruned):
    during = [transition for transition in pruned["transitions"] if transition["during_prune"]]
    assert len(during) >= 10, pruned["transitions"]  # they overlapped the pruning
    assert all(transition["ended"] for transition in during)
    slowest = max(transition["seconds"] for transition in during)
    assert slowest < 0.5, f"an ask's ending took {slowest:.3f} s while pruning ran"


def test_a_prune_batch_is_short(pruned):
    assert pruned["slowest_pass_seconds_per_batch"] < 0.5
