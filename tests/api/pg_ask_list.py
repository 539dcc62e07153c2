"""``GET /api/v1/asks?status=`` on a seeded PostgreSQL database, as the server runs it: on one
pooled connection with prepared statements on, so that after a few runs PostgreSQL could switch
the statement to a generic plan (one plan for any status).

    DATABASE_URL=postgres://… ASKCARDS_DB_PREPARE=1 DJANGO_SETTINGS_MODULE=project.settings \\
        .venv/bin/python -m tests.api.pg_ask_list [--runs 15]

For the agent with the most asks and each status of ``--statuses`` (a rare one, one with no rows,
the open one, the common one): ``--runs`` requests through Django's test client with the agent's
(rotated) key, one after another. Each statement's executed plan is caught with ``auto_explain``
(loaded into the session, its output sent to the client as a NOTICE), so the plans reported are
the ones the last request really ran, prepared or not. Then, as a control, the same page read the
way the view read it before ``selectors.ask_page`` (``ask_list(...)[:50]``, one statement) as many
times. Prints one JSON document (tests/scale/test_api_lists_at_size.py and docs/performance.md
read it): per mode and status, the request times, the backend pids used, the prepared statements
the connection holds for the list's statements (``statement_kind``: the page's ids, their rows, or
the one-statement read; with PostgreSQL's generic and custom plan counts), and the last run's plan
of each (its scans and indexes, rows read and removed by filters, buffers).
Needs a seeded database (``tests.bench.seed``).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from typing import Any

import django


def statement_kind(sql: str) -> str | None:
    """Which of the list's statements ``sql`` is: the page's ids (``ids``: ask_page's first), their
    rows (``rows``), or the page read as one statement (``list``: the read before ask_page)."""
    joined = 'FROM "askcards_ask" INNER JOIN "askcards_session"' in sql
    if re.match(r'SELECT "askcards_ask"\."id"( AS "id")? FROM "askcards_ask" WHERE', sql) and "LIMIT" in sql:
        return "ids"
    if joined and "LIMIT" in sql:
        return "list"
    if joined and '"askcards_ask"."id" IN (' in sql:
        return "rows"
    return None


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", ()):
        nodes += plan_nodes(child)
    return nodes


def summary(document: dict[str, Any]) -> dict[str, Any]:
    nodes = plan_nodes(document["Plan"])
    return {
        "nodes": [node["Node Type"] + (f" ({node['Index Name']})" if "Index Name" in node else "")
                  + (f" on {node['Relation Name']}" if "Relation Name" in node else "") for node in nodes],
        "indexes": sorted({node["Index Name"] for node in nodes if "Index Name" in node}),
        "rows_removed": sum(node.get("Rows Removed by Filter", 0) for node in nodes),
        "ask_rows_read": sum(node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0) for node in nodes
                             if node.get("Relation Name") == "askcards_ask"),
        "shared_hit": document["Plan"].get("Shared Hit Blocks", 0),
        "shared_read": document["Plan"].get("Shared Read Blocks", 0),
        "ms": document["Plan"].get("Actual Total Time"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--statuses", default="failed,reserved,pending,answered")
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args()
    django.setup()
    from django.db import connection
    from django.db.models import Count
    from django.test import Client
    from django.test.utils import setup_test_environment

    from askcards import selectors, services
    from askcards.models import Agent

    setup_test_environment()  # the test client's host
    agent = Agent.objects.annotate(n=Count("asks")).order_by("-n").first()
    key = services.agent_rotate_key(agent=agent)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    plans: list[dict[str, Any]] = []

    def driver():
        connection.ensure_connection()
        raw = connection.connection
        if not getattr(raw, "_ask_list_explained", False):
            # Every statement's executed plan, as a NOTICE to this client (auto_explain).
            raw.add_notice_handler(lambda diag: plans.append({"text": diag.message_primary or ""}))
            with raw.cursor() as cursor:
                for statement in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                                  "SET auto_explain.log_analyze = on", "SET auto_explain.log_buffers = on",
                                  "SET auto_explain.log_format = json", "SET auto_explain.log_level = notice"):
                    cursor.execute(statement)
            raw._ask_list_explained = True
        return raw

    def last_plans() -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for notice in reversed(plans):
            text = notice["text"]
            if "plan:" not in text:
                continue
            document = json.loads(text.split("plan:", 1)[1])
            kind = statement_kind(document.get("Query Text", ""))
            if kind and kind not in found:
                found[kind] = summary(document)
        return found

    def prepared() -> dict[str, dict[str, int]]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            rows = cursor.fetchall()
        return {kind: {"generic_plans": generic, "custom_plans": custom} for statement, generic, custom in rows
                if (kind := statement_kind(statement))}

    def read(mode: str, status: str) -> None:
        if mode == "view":
            response = client.get("/api/v1/asks", {"status": status, "limit": args.limit})
            assert response.status_code == 200, response.content[:300]
        else:  # the read before ask_page: the lazy list evaluated as any other statement
            list(selectors.ask_list(agent=agent, status=status)[: args.limit])

    report: dict[str, Any] = {"agent_asks": agent.n, "prepare_threshold": None, "modes": {}}
    for mode in ("view", "plain"):
        report["modes"][mode] = {}
        for status in args.statuses.split(","):
            times, pids = [], set()
            for _ in range(args.runs):
                raw = driver()
                report["prepare_threshold"] = raw.prepare_threshold
                pids.add(raw.info.backend_pid)
                started = time.perf_counter()
                read(mode, status)
                times.append((time.perf_counter() - started) * 1000)
            driver()
            report["modes"][mode][status] = {
                "ms": [round(ms, 2) for ms in times], "median_ms": round(statistics.median(times), 2),
                "last_ms": round(times[-1], 2), "pids": sorted(pids), "prepared": prepared(),
                "plans": last_plans(),
            }
            plans.clear()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
