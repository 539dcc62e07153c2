"""``GET /api/v1/asks?status=`` stays flat at size, as the server runs it: prepared statements on
(``ASKCARDS_DB_PREPARE=1``), the same request many times on one pooled connection, which is when
PostgreSQL switches a prepared statement to one generic plan for every status. Read as one
statement, that plan (or, for a common status behind many others, even the plan for the value)
walked the agent's history newest first (docs/performance.md); selectors.ask_page reads the
page's ids from ask_agent_status_created_idx alone, then their rows by primary key.

tests.api.pg_ask_list catches each executed plan with auto_explain on the 110,000 asks of the
``lists_db`` fixture (the agent listed has 11,000 of them; the newest 1,000 are pending).
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.postgres

RUNS = 15  # past psycopg's prepare threshold (5) and PostgreSQL's 5 custom plans before a generic one
STATUSES = ("failed", "reserved", "pending", "answered")  # rare, none, the newest, the common one


@pytest.fixture(scope="module")
def ask_lists(lists_db):
    return lists_db.run("tests.api.pg_ask_list", "--runs", str(RUNS), "--statuses", ",".join(STATUSES),
                        env={"ASKCARDS_DB_PREPARE": "1"})


def test_the_requests_ran_prepared_on_one_connection(ask_lists):
    assert ask_lists["prepare_threshold"] == 5
    for mode in ("view", "plain"):
        for status in STATUSES:
            assert len(ask_lists["modes"][mode][status]["pids"]) == 1, (mode, status)
    # The generic-plan case happened: the page's ids statement is prepared and PostgreSQL ran it
    # on its generic plan (the plans below are what those runs executed).
    ids = [ask_lists["modes"]["view"][status]["prepared"].get("ids") for status in STATUSES]
    assert all(ids) and ids[-1]["generic_plans"] > 0, ids


@pytest.mark.parametrize("status", STATUSES)
def test_a_status_page_reads_its_own_rows_only(ask_lists, status):
    plans = ask_lists["modes"]["view"][status]["plans"]
    assert "ids" in plans, plans
    ids, rows = plans["ids"], plans.get("rows")
    # The ids: an index-only scan of the agent's rows of that status, newest first, no more of them
    # than the page shows; where one statement walked every ask of the agent for a status with none.
    assert "Index Only Scan (ask_agent_status_created_idx) on askcards_ask" in ids["nodes"], ids
    assert ids["rows_removed"] == 0 and ids["ask_rows_read"] <= 50, ids
    if status == "reserved":  # no such asks: nothing more to read
        assert rows is None and ids["ask_rows_read"] == 0 and ids["shared_hit"] + ids["shared_read"] < 10
    else:  # then the page's rows, by their ids
        assert rows is not None and rows["ask_rows_read"] <= 50, rows
        assert not any(index.startswith("askcards_ask_created_at") for index in rows["indexes"]), rows
