"""``GET /api/v1/asks?status=`` stays flat at size, as the server runs it: prepared statements on
(``ASKCARDS_DB_PREPARE=1``), the same request many times on one pooled connection, which is when
PostgreSQL may switch a prepared statement to one generic plan for every status. That plan walked
the agent's whole history newest first for a status with few or no rows (tests/bench/README.md).

tests.api.pg_ask_list catches each executed plan with auto_explain on the 110,000 asks of the
``lists_db`` fixture (the agent listed has 11,000 of them).
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres

RUNS = 15  # past psycopg's prepare threshold (5) and PostgreSQL's 5 custom plans before a generic one


@pytest.fixture(scope="module")
def ask_lists(lists_db):
    return lists_db.run("tests.api.pg_ask_list", "--runs", str(RUNS), env={"ASKCARDS_DB_PREPARE": "1"})


def test_the_server_prepares_statements_here(ask_lists):
    # The control: read plainly, the list's SELECT is prepared on the connection and PostgreSQL
    # has run it on a generic plan (whatever that plan is on this data).
    assert ask_lists["prepare_threshold"] == 5
    control = ask_lists["modes"]["plain"]["reserved"]
    assert len(control["pids"]) == 1, control["pids"]  # one connection throughout
    assert control["prepared"] and control["prepared"][0]["generic_plans"] > 0


@pytest.mark.parametrize("status", ["failed", "reserved", "pending"])
def test_a_status_list_is_planned_for_its_status_every_time(ask_lists, status):
    found = ask_lists["modes"]["view"][status]
    assert len(found["pids"]) == 1, found["pids"]  # all runs on one connection
    assert found["prepared"] == []  # never a prepared statement, so never a generic plan
    plan = found["plan"]
    assert plan is not None, "auto_explain caught no plan of the list's SELECT"
    # The rows of that status, newest first, from a status-led index (the agent's, or for a status
    # no ask has, the admin's: it finds nothing either way): no more ask rows read than the page
    # shows, where the created-order walk read every ask of the agent.
    assert {"ask_agent_status_created_idx", "ask_status_created_idx"} & set(plan["indexes"]), plan
    assert not any(index.startswith("askcards_ask_created_at") for index in plan["indexes"]), plan
    assert plan["rows_removed"] == 0 and plan["ask_rows_read"] <= 51, plan


def test_a_status_with_no_rows_reads_nothing(ask_lists):
    plan = ask_lists["modes"]["view"]["reserved"]["plan"]
    assert plan["ask_rows_read"] == 0 and plan["shared_hit"] + plan["shared_read"] < 20, plan


def test_the_last_requests_cost_what_the_first_did(ask_lists):
    # Nothing changes once a generic plan could have taken over: the last five runs are not slower
    # than the first five (medians; generously, the machine is shared).
    for status in ("failed", "reserved", "pending"):
        times = ask_lists["modes"]["view"][status]["ms"]
        first, last = sorted(times[:5])[2], sorted(times[-5:])[2]
        assert last < max(3 * first, first + 20), (status, times)
