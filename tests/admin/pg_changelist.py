"""Open the admin's large lists on a PostgreSQL database and report what each page ran.

    DATABASE_URL=postgres://… ASKCARDS_DB_PREPARE=0 DJANGO_SETTINGS_MODULE=project.settings \\
        .venv/bin/python -m tests.admin.pg_changelist [--rounds 3]

For every list (asks, sessions, outbox, audit) unfiltered and under each filter it offers (with
the rare values of ``tests.bench.seed.RARE``), as a signed-in superuser through Django's test
client: the page's time (median of ``--rounds``), each statement it ran, PostgreSQL's plan of each
(EXPLAIN, FORMAT JSON; estimates only, nothing is run twice), the tables any plan scans
sequentially, and the COUNT statements. Prints one JSON document (tests/scale/test_admin_lists_at_size.py
and docs/performance.md read it). ``ASKCARDS_DB_PREPARE=0``: the captured statements then carry
their parameters inline, so they can be explained as they are.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import django

BIG_TABLES = {"askcards_ask", "askcards_askevent", "askcards_outboxevent", "askcards_respondent", "askcards_session"}


def pages() -> list[tuple[str, dict[str, str]]]:
    """(list, query string) for each page: unfiltered, then one per filter on a rare value."""
    from tests.bench.seed import RARE

    today = {"created_at__gte": "2000-01-01 00:00:00+00:00", "created_at__lt": "2100-01-01 00:00:00+00:00"}
    return [
        ("ask", {}),
        ("ask", {"status__exact": RARE["status"]}),
        ("ask", {"status__exact": "pending"}),
        ("ask", {"reason": RARE["reason"]}),
        ("ask", {"tool": RARE["tool"]}),
        ("ask", {"platform__exact": RARE["platform"]}),
        ("ask", today),
        ("session", {}),
        ("session", {"platform__exact": RARE["platform"]}),
        ("session", {"chat_type__exact": RARE["chat_type"]}),
        ("session", {"agent__id__exact": "1"}),
        ("session", today),
        ("outboxevent", {}),
        ("outboxevent", {"delivery": "waiting"}),
        ("outboxevent", {"delivery": "delivered"}),
        ("outboxevent", {"delivery": "failed"}),
        ("outboxevent", {"type__exact": RARE["type"]}),
        ("outboxevent", {"agent__id__exact": "1"}),
        ("outboxevent", today),
        ("askevent", {}),
        ("askevent", {"kind__exact": RARE["kind"]}),
        ("askevent", today),
    ]


def tables(sql: str) -> list[str]:
    return sorted(table for table in BIG_TABLES if f'"{table}"' in sql)


def full_scan_costs(connection) -> dict[str, float]:
    """What the planner reckons reading each big table whole costs (a sequential scan)."""
    return {table: explain(connection, f'SELECT * FROM "{table}"')["Total Cost"] for table in sorted(BIG_TABLES)}


def seq_scans(plan: dict[str, Any]) -> list[str]:
    found = [plan["Relation Name"]] if plan.get("Node Type") == "Seq Scan" else []
    for child in plan.get("Plans", ()):
        found += seq_scans(child)
    return found


def plan_summary(plan: dict[str, Any]) -> str:
    """The plan's nodes, outermost first: ``Limit > Index Scan Backward on askcards_ask (ask_…)``."""
    node = plan["Node Type"] + (" Backward" if plan.get("Scan Direction") == "Backward" else "")
    if "Relation Name" in plan:
        node += f" on {plan['Relation Name']}"
    if "Index Name" in plan:
        node += f" ({plan['Index Name']})"
    children = [plan_summary(child) for child in plan.get("Plans", ())]
    return node + (" > " + " | ".join(children) if children else "")


def row_estimate(connection, table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
        return int(cursor.fetchone()[0])


def explain(connection, sql: str) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        document = cursor.fetchone()[0]
    return (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="one list: ask, session, outboxevent or askevent")
    args = parser.parse_args()
    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment
    from django.urls import reverse

    setup_test_environment()  # the test client's hosts
    user, _ = get_user_model().objects.get_or_create(username="scale-admin", defaults={"is_superuser": True, "is_staff": True})
    client = Client()
    client.force_login(user)
    client.get(reverse("admin:index"))  # warm up: imports, templates
    report = []
    for model, params in pages():
        if args.only and model != args.only:
            continue
        url = reverse(f"admin:askcards_{model}_changelist")
        times = []
        for _ in range(args.rounds):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url, params)
                times.append(time.perf_counter() - started)
            assert response.status_code == 200, (url, params, response.status_code)
        statements = []
        for query in queries.captured_queries:
            sql = query["sql"]
            if not sql.startswith("SELECT") or not any(f'"{table}"' in sql for table in BIG_TABLES):
                continue
            plan = explain(connection, sql)
            statements.append({"sql": sql, "seq_scans": sorted(set(seq_scans(plan)) & BIG_TABLES), "tables": tables(sql),
                               "plan_cost": plan["Total Cost"], "plan": plan_summary(plan), "ms": float(query["time"]) * 1000})
        report.append({"list": model, "params": params, "ms": statistics.median(times) * 1000,
                       "statements": statements, "rows_shown": len(response.context["cl"].result_list),
                       "result_count": response.context["cl"].result_count})
    print(json.dumps({"pages": report, "full_scan_costs": full_scan_costs(connection),
                      "rows": {table: row_estimate(connection, table) for table in sorted(BIG_TABLES)}}))


if __name__ == "__main__":
    main()
