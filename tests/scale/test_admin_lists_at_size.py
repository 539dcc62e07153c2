"""The admin's lists of the tables that grow with use (asks, sessions, outbox, audit) stay cheap at
a million rows: no count of the whole table, and every filter and the ordering served by an index.

These tests seed 110,000 asks (the ``lists_db`` fixture, tests.bench.seed: 100,000 closed with audit
rows and outbox events, 10,000 pending) and read the plans of the statements each list page runs
(tests.admin.pg_changelist), on the rare value of each filter: a filter without its index makes
PostgreSQL read the table whole or walk another index through most of it.
"""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.postgres

# The indexes that may serve each page's list and count statements (its scan of the big table),
# by the filter's parameter. A common value (pending: 9 % of the asks) may rather walk the
# created-order index until it has a page; the rare values of tests.bench.seed.RARE must use the
# filter's own index (platform: the ask's own copy of its session's).
CREATED = "askcards_ask_created_at_"
SERVED_BY = {
    ("ask", ""): {CREATED},
    ("ask", "status__exact=failed"): {"ask_status_created_idx"},
    ("ask", "status__exact=pending"): {"ask_status_created_idx", CREATED},
    ("ask", "reason=not_available"): {"ask_status_created_idx"},
    ("ask", "tool=dingtalk_ask_user_question"): {"ask_tool_created_idx"},
    ("ask", "platform__exact=wechat"): {"ask_platform_created_idx"},
    ("ask", "created_at__gte&created_at__lt"): {CREATED},
    ("outboxevent", ""): {"askcards_outboxevent_pkey"},
    ("outboxevent", "delivery=waiting"): {"outbox_due_idx"},
    ("outboxevent", "delivery=delivered"): {"askcards_outboxevent_pkey"},
    ("outboxevent", "delivery=failed"): {"outbox_given_up_idx"},
    ("outboxevent", "type__exact=session.cancel_requested"): {"outbox_type_idx"},
    ("outboxevent", "agent__id__exact=1"): {"askcards_outboxevent_pkey", "outbox_agent_seq_unique"},
    ("outboxevent", "created_at__gte&created_at__lt"): {"askcards_outboxevent_pkey"},
    ("askevent", ""): {"askcards_askevent_pkey"},
    ("askevent", "kind__exact=ignored"): {"ask_event_kind_idx"},
    ("askevent", "created_at__gte&created_at__lt"): {"askcards_askevent_pkey"},
}


def page_key(page) -> tuple[str, str]:
    params = page["params"]
    if "created_at__gte" in params:
        return page["list"], "created_at__gte&created_at__lt"
    return page["list"], "&".join(f"{name}={value}" for name, value in sorted(params.items()))


@pytest.fixture(scope="module")
def lists(lists_db):
    return lists_db.run("tests.admin.pg_changelist", "--rounds", "1")


def big_pages(lists):
    """(page, its table) for each list page whose table is large (≥ the estimate threshold)."""
    from askcards.selectors import EXACT_COUNT_BELOW

    for page in lists["pages"]:
        table = f"askcards_{page['list']}"
        if lists["rows"][table] >= EXACT_COUNT_BELOW:
            yield page, table


def test_large_lists_never_scan_a_large_table_whole(lists):
    large = {table for table, rows in lists["rows"].items() if rows >= 50_000}
    scans = [
        (page["list"], page["params"], statement["sql"][:200])
        for page in lists["pages"] for statement in page["statements"] if set(statement["seq_scans"]) & large
    ]
    assert scans == []
    assert {page["list"] for page, _ in big_pages(lists)} == {"ask", "outboxevent", "askevent"}


def test_large_lists_filter_and_order_through_their_index(lists):
    wrong = []
    for page, table in big_pages(lists):
        key = page_key(page)
        main = [s for s in page["statements"] if s["sql"].startswith((f'SELECT "{table}"."id"', "SELECT COUNT(*)"))]
        assert len(main) == 2, (key, [s["sql"][:80] for s in page["statements"]])  # the page and its count
        wrong += [(key, s["plan"]) for s in main if not any(f"({index}" in s["plan"] for index in SERVED_BY[key])]
    assert wrong == [], "\n".join(map(str, wrong))


def test_large_lists_never_count_a_whole_table(lists):
    counts = [
        statement["sql"]
        for page, table in big_pages(lists) for statement in page["statements"]
        if re.match(rf'SELECT COUNT\(\*\) AS "__count" FROM "{table}"', statement["sql"])
    ]
    assert counts == []


def test_large_lists_page_through_an_estimated_count(lists):
    ask_list = next(page for page in lists["pages"] if page["list"] == "ask" and not page["params"])
    assert ask_list["rows_shown"] == 100  # one page, not the table
    assert abs(ask_list["result_count"] - 110_000) < 11_000  # PostgreSQL's estimate of the table
    assert any("reltuples" in statement["sql"] for statement in ask_list["statements"])


def test_large_lists_count_a_short_filtered_list_exactly(lists):
    # About 1 in 4,096 events is a session.cancel_requested: fewer than COUNT_UP_TO, so counted,
    # and all on one page.
    rare = next(page for page in lists["pages"] if page["params"] == {"type__exact": "session.cancel_requested"})
    assert rare["result_count"] == rare["rows_shown"] > 0


@pytest.mark.parametrize("params, index", [
    ({"platform__exact": "wechat"}, "ask_platform_created_idx"),
    ({"tool": "dingtalk_ask_user_question"}, "ask_tool_created_idx"),
])
def test_platform_and_tool_filters_read_their_own_index(lists, params, index):
    # A platform or tool with 1 % of the asks: its page and its count read that value's rows, newest
    # first, instead of walking every ask's created time (or joining the sessions) to find them.
    page = next(page for page in lists["pages"] if page["list"] == "ask" and page["params"] == params)
    main = [s for s in page["statements"] if s["sql"].startswith(('SELECT "askcards_ask"."id"', "SELECT COUNT(*)"))]
    assert len(main) == 2 and all(f"({index})" in s["plan"] for s in main), [s["plan"] for s in main]
    assert all("askcards_session" not in s["tables"] for s in main)
    assert 0 < page["rows_shown"] <= 100 and page["result_count"] >= page["rows_shown"]
