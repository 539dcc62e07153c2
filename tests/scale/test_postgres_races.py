"""Concurrent endings of the same asks from several processes on PostgreSQL (SPEC §5 rule 1, §8).

Six processes start at one wall-clock instant and walk the same 20 asks in the same order: three
answer on the web surface, one answers on Feishu, one cancels as the agent, one expires (the
deadlines are already past). Each ask must end exactly once, with one outbox event and one
"closed" audit row, an "ignored" row per losing process, and gap-free outbox sequence numbers.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.scale import harness

pytestmark = pytest.mark.postgres

ASKS = 20
RACERS = [
    ["act", "answer", "--surface", "web", "--label", "web-1"],
    ["act", "answer", "--surface", "web", "--label", "web-2"],
    ["act", "answer", "--surface", "web", "--label", "web-3"],
    ["act", "answer", "--surface", "feishu", "--label", "feishu-1"],
    ["act", "cancel"],
    ["act", "expire"],
]
ENDING = {"answer": ("answered", "submitted"), "cancel": ("cancelled", "by_agent"), "expire": ("expired", "timeout")}


@pytest.fixture(scope="module")
def race(pg_db):
    """Set up the asks, run the six processes once; every test below checks one outcome."""
    setup = harness.run_actor(pg_db, "setup", "--agent", "racer", "--asks", str(ASKS), "--past")
    outputs = harness.run_actors_together(pg_db, [racer + setup["ask_ids"] for racer in RACERS])
    return setup, outputs


def _winners(outputs) -> dict[str, list[dict]]:
    winners: dict[str, list[dict]] = {}
    for output in outputs:
        for ask_id in output["won"]:
            winners.setdefault(ask_id, []).append(output)
    return winners


def test_racing_processes_raise_nothing(race):
    _, outputs = race
    assert [output["errors"] for output in outputs] == [{}] * len(RACERS)


def test_racing_processes_have_exactly_one_winner_per_ask(race):
    setup, outputs = race
    winners = _winners(outputs)
    assert {ask_id: len(winners.get(ask_id, [])) for ask_id in setup["ask_ids"]} == dict.fromkeys(setup["ask_ids"], 1)
    for output in outputs:
        assert sorted(output["won"] + output["lost"]) == sorted(setup["ask_ids"])
    print("wins:", Counter(o["label"] if o["role"] == "answer" else o["role"] for o in outputs for _ in o["won"]))


def test_racing_processes_leave_the_winners_ending(race, pg_db):
    setup, outputs = race
    winners = _winners(outputs)
    rows = pg_db.query(
        "SELECT a.id, a.status, a.reason, a.result->'answers'->0->>'customInput', r.status, r.surface, "
        "r.answers->0->>'customInput' FROM askcards_ask a JOIN askcards_respondent r ON r.ask_id = a.id "
        "WHERE a.agent_id = %s",
        setup["agent_id"],
    )
    assert len(rows) == ASKS
    for ask_id, status, reason, answer, respondent_status, surface, respondent_answer in rows:
        winner = winners[ask_id][0]
        assert (status, reason) == ENDING[winner["role"]], ask_id
        if winner["role"] == "answer":
            assert answer == respondent_answer == winner["label"], ask_id
            assert (respondent_status, surface) == ("submitted", winner["surface"]), ask_id
        else:
            assert respondent_status != "submitted" and respondent_answer is None, ask_id


def test_racing_processes_write_one_closed_event_and_outbox_row_per_ask(race, pg_db):
    setup, _ = race
    closed = dict(pg_db.query(
        "SELECT ask_id, count(*) FROM askcards_askevent WHERE kind = 'closed' AND ask_id = ANY(%s) GROUP BY ask_id",
        setup["ask_ids"],
    ))
    outbox = dict(pg_db.query(
        "SELECT ask_id, count(*) FROM askcards_outboxevent WHERE type = 'ask.closed' AND agent_id = %s "
        "GROUP BY ask_id",
        setup["agent_id"],
    ))
    assert closed == dict.fromkeys(setup["ask_ids"], 1)
    assert outbox == dict.fromkeys(setup["ask_ids"], 1)


def test_racing_processes_audit_every_loser_as_ignored(race, pg_db):
    setup, _ = race
    ignored = dict(pg_db.query(
        "SELECT ask_id, count(*) FROM askcards_askevent WHERE kind = 'ignored' AND ask_id = ANY(%s) GROUP BY ask_id",
        setup["ask_ids"],
    ))
    assert ignored == dict.fromkeys(setup["ask_ids"], len(RACERS) - 1)


def test_racing_processes_keep_outbox_seq_gap_free(race, pg_db):
    setup, _ = race
    seqs = [seq for (seq,) in pg_db.query(
        "SELECT seq FROM askcards_outboxevent WHERE agent_id = %s ORDER BY seq", setup["agent_id"]
    )]
    assert seqs == list(range(1, ASKS + 1))
    assert pg_db.query("SELECT event_seq FROM askcards_agent WHERE id = %s", setup["agent_id"]) == [(ASKS,)]
