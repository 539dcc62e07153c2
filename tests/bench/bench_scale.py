"""Scale benchmark: does each hot path cost the same on a big database as on an empty one?

Run from the project directory (not collected by pytest: the file is not named test_*):

    .venv/bin/python -m tests.bench.bench_scale [--closed 1000000] [--pending 100000] [--sessions 10000]
    .venv/bin/python -m tests.bench.bench_scale --quick      # 50,000 / 5,000 / 500

Every step is bounded in time and count, every connection goes to 127.0.0.1:

1. Two throwaway PostgreSQL databases on ``postgres://postgres@127.0.0.1:5432``, ``askcards_scale_<hex>_empty``
   and ``…_seeded`` (dropped at the end, always), each migrated, with the same Feishu bot (its
   ``--base-url`` a Feishu stand-in, ``tests/bench/feishu_stub.py``), agent ``bench`` and a staff
   user whose login session is written directly (``tests.bench.harness.seed_fixture``).
2. The seeded one gets, in SQL (``tests.bench.seed``: ``INSERT … SELECT generate_series``, one
   statement per table), all of them the agent's: ``--sessions`` sessions (80 % Feishu chats of
   the bot, each with a running progress card and its card message in sync; web, DingTalk and
   WeChat the rest); ``--closed`` closed asks over the last 60 days in every status · reason (71 %
   answered · submitted, 12 % expired, 0.7 % failed, …; results delivered, answers purged after
   the 7 days of retention), each with one respondent, three audit rows (created, activated,
   closed; every 50th a fourth) and one outbox event (delivered; every 100th given up);
   ``--pending`` pending asks of the last hour spread over the sessions (deadlines a day or more
   away), each with one respondent and two audit rows. Then ``VACUUM (ANALYZE)``: the state of a
   database that has been running for a while.
3. Both get the same hot fixture through the services (as the API would make it): 50 failed asks
   dated before the seeded history (a web session no panel shows), and a few Feishu
   sessions with a live progress card and 5 pending asks each, the cards marked as sent.
4. One daphne server per database (``daphne -b 127.0.0.1 -p PORT project.asgi:application``, no
   worker, the same settings) and, per figure, ``--rounds`` alternating rounds (empty, seeded,
   empty, seeded, …), each request sent when the previous returned (one client): the yardstick
   ``GET /healthz``; signed and encrypted Feishu submits answering the fixture's asks;
   ``POST /api/v1/tools/call``; ``GET /api/v1/asks`` (the first page, a status filter whose rows
   are 1 % of the asks, i.e. deep in the agent's newest-first list, and one session's asks);
   ``GET /api/v1/events`` (the first page and the newest); the admin's ask changelist and an
   ask's change page (staff session cookie).
5. The servers stopped, the worker's steps timed in a process per database (``askcards.worker``
   lanes and the services they call, directly): the deadline sweep with nothing due and with 100
   due asks, the card-sync claim query with nothing due and a card-sync pass (the cards the
   submits changed, PATCHed to the stand-in), the answer purge with nothing due and with the
   submits' answers due.
6. Each figure printed as ``empty / seeded = ratio [ok|MISSED]`` against the target (1.5 ×); for
   a missed one, the slowest SQL statement of one run of it on the seeded database, with its
   ``EXPLAIN (ANALYZE, BUFFERS)`` (``--explain all`` for every figure).

Figures are printed, not asserted; see docs/performance.md. ``--runs N`` does all of it N times
(fresh databases, seeding and servers each run: ``--rounds`` is taken, by the alternating rounds of
step 4) and ends with the min / median / max of every figure over the runs (tests/bench/common.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from django.contrib.admin.utils import quote as admin_quote
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench.common import Figure, add_rounds_argument, at_most, check_rounds, percentile, run_rounds, say
from tests.bench.harness import (
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    HOST,
    PASSWORD,
    PG_SERVER,
    PYTHON,
    QUESTIONS,
    VERIFICATION_TOKEN,
    PendingSubmit,
    Processes,
    bench_env,
    check_submit_response,
    free_port,
    last_json,
    pg_admin,
    pg_available,
    read_stub_port,
    run_manage,
    run_python,
    seed_cards,
    seed_fixture,
    submit_request,
    wait_until_serving,
)

TARGET = 1.5  # seeded / empty
AGENT = "bench"
USERNAME = "benchstaff"
STEP_TIMEOUT = 1800  # seconds for any one seeding or measuring subprocess / SQL statement
PER_CARD = 5
FIXTURE_FAILED = 50  # failed asks of the hot fixture: one page of GET /asks?status=failed
QUICK = {"closed": 50_000, "pending": 5_000, "sessions": 500}

# The hot fixture's page of failed asks (its cards come from tests.bench.harness.seed_cards), on
# both databases alike: a web session no panel shows, so its asks fail (no_surface), dated before
# the seeded history: ?status=failed lists a full page on the empty database too, and on the
# seeded one reaching these by walking the history would read all of it.
FAILED_SEED = r"""
import json, sys, django
django.setup()
from datetime import timedelta
from django.utils import timezone
from askcards import services
from askcards.models import Agent, Ask

params = json.loads(sys.argv[1])
agent = Agent.objects.get(name=params["agent"])
web, _ = services.session_upsert(agent=agent, key="web/bench-failed", platform="web")
for number in range(params["failed"]):
    out = services.tool_call(agent=agent, session=web, name="ask_user_questions",
                             arguments={"questions": params["questions"]}, timeout_seconds=3600)
    if out.status != "failed":
        raise SystemExit(f"fixture ask not failed: {out.status} {out.tool_result}")
    Ask.objects.filter(pk=out.ask.pk).update(created_at=timezone.now() - timedelta(days=61, seconds=number))
print(json.dumps({"failed": params["failed"]}))
"""

# The worker's steps, timed in their own process against one database.
WORKER = r"""
import json, re, sys, time, statistics, django
django.setup()
from datetime import timedelta
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from askcards import services
from askcards.models import Ask, Bot, CardMessage
from askcards.surfaces import sync
from askcards.surfaces.feishu.surface import BATCH
from askcards.worker import Worker

params = json.loads(sys.argv[1])
reps, hot = params["reps"], params["hot_prefix"]
worker = Worker()

def timed(fn):
    started = time.perf_counter()
    value = fn()
    return (time.perf_counter() - started) * 1000, value

def profiled(name, fn):
    # A one-shot step, timed, with its statements summed by shape (the SQL up to its first
    # literal) and the slowest one, for the report.
    with CaptureQueriesContext(connection) as captured:
        ms, value = timed(fn)
    shapes = {}
    for query in captured.captured_queries:
        shape = re.split(r"'|\b\d", query["sql"], maxsplit=1)[0][:140]
        count, total = shapes.get(shape, (0, 0.0))
        shapes[shape] = (count + 1, total + float(query["time"]) * 1000)
    statements = [q for q in captured.captured_queries if q["sql"].split(None, 1)[0].upper() in STATEMENTS]
    slowest = max(statements, key=lambda q: float(q["time"]), default={"sql": ""})
    top = sorted(([total, count, shape] for shape, (count, total) in shapes.items()), reverse=True)[:4]
    out[name] = {"ms": [ms], "count": value, "statements": len(captured.captured_queries), "shapes": top,
                 "slowest": slowest["sql"]}

def repeated(fn):
    fn()  # warm-up: connection, prepared statements
    return [timed(fn)[0] for _ in range(reps)]

STATEMENTS = {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}
out = {}
unsynced = CardMessage.objects.filter(version__gt=F("synced_version")).count()
profiled("card_sync_pass", worker.card_sync)
out["card_sync_pass"]["unsynced"] = unsynced
out["card_claim_idle"] = {"ms": repeated(lambda: sync.due_card_messages(
    timezone.now(), platform=Bot.Platform.FEISHU, limit=BATCH, progress_card__isnull=False))}
out["sweep_idle"] = {"ms": repeated(lambda: services.expire_due(now=timezone.now()))}
due = list(Ask.objects.filter(status=Ask.Status.PENDING, session__key__startswith=hot)
           .order_by("created_at").values_list("pk", flat=True)[: params["due"]])
Ask.objects.filter(pk__in=due).update(deadline=timezone.now() - timedelta(seconds=1))
profiled("sweep_due", lambda: services.expire_due(now=timezone.now()))
out["purge_idle"] = {"ms": repeated(lambda: services.purge_answers(now=timezone.now()))}
answered = Ask.objects.filter(status=Ask.Status.ANSWERED, answers_purged_at__isnull=True, session__key__startswith=hot)
answered.update(result_delivered_at=timezone.now() - timedelta(days=30))
profiled("purge_due", lambda: services.purge_answers(now=timezone.now()))
print(json.dumps(out))
"""

# One run of a figure's code path in-process on one database: its statements, the slowest with
# its plan. Writes happen inside a transaction that is rolled back (EXPLAIN ANALYZE executes).
EXPLAIN = r"""
import json, re, sys, time, django
django.setup()
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from askcards import services
from askcards.models import Bot
from askcards.surfaces import sync
from askcards.surfaces.feishu.surface import BATCH
from tests.bench.harness import PendingSubmit, submit_request

params = json.loads(sys.argv[1])
client = Client(HTTP_HOST="127.0.0.1")
client.cookies[params["cookie_name"]] = params["session_key"]
bearer = {"HTTP_AUTHORIZATION": f"Bearer {params['key']}"}

def run(figure):
    spec = params["figures"][figure]
    kind = spec["kind"]
    if kind == "get":
        return client.get(spec["path"], **(bearer if spec.get("api") else {}))
    if kind == "tools_call":
        return client.post(spec["path"], data=json.dumps(spec["body"]), content_type="application/json", **bearer)
    if kind == "callback":
        body, headers = submit_request(PendingSubmit(*spec["item"]))
        meta = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()
                if name != "Content-Type"}
        return client.post(spec["path"], data=body, content_type=headers["Content-Type"], **meta)
    if kind == "sql":  # a one-shot worker step's slowest statement, as it ran
        with connection.cursor() as cursor:
            cursor.execute(spec["sql"])
        return None
    if kind == "sweep_idle":
        return services.expire_due(now=timezone.now())
    if kind == "purge_idle":
        return services.purge_answers(now=timezone.now())
    if kind == "card_claim_idle":
        return sync.due_card_messages(timezone.now(), platform=Bot.Platform.FEISHU, limit=BATCH,
                                      progress_card__isnull=False)
    raise SystemExit(f"no in-process run for {figure}")

STATEMENTS = {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}
recorded = []

def record(execute, sql, params, many, context):
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        if not many and sql.split(None, 1)[0].upper() in STATEMENTS:
            recorded.append(((time.perf_counter() - started) * 1000, sql, params))

def plan_of(sql):
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return "\n".join(row[0] for row in cursor.fetchall())

def generic_plan(sql, params):
    # The plan a pooled connection runs once psycopg has prepared the statement (after
    # prepare_threshold runs) and PostgreSQL has switched it to a generic plan: $n, not values.
    numbered, count = [], 0
    for piece in re.split(r"(%%|%s)", sql):
        if piece == "%s":
            count += 1
            piece = f"${count}"
        elif piece == "%%":
            piece = "%"
        numbered.append(piece)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("PREPARE bench_generic AS " + "".join(numbered))
    explain = "EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_generic (" + ", ".join(["%s"] * count) + ")"
    plan = plan_of(connection.ops.compose_sql(explain, params))
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE bench_generic")
    return plan

report = {}
for figure in params["explain"]:
    if params["figures"][figure]["kind"] not in ("get", "sweep_idle", "purge_idle", "card_claim_idle"):
        with transaction.atomic():
            run(figure)  # warm-up
            transaction.set_rollback(True)
    else:
        run(figure)
    with transaction.atomic():
        recorded.clear()
        with connection.execute_wrapper(record):
            response = run(figure)
        queries = sorted(recorded, key=lambda q: q[0], reverse=True)
        text = [connection.ops.compose_sql(sql, args) if args else sql for _, sql, args in queries]
        plan = generic = ""
        if queries:
            plan = plan_of("EXPLAIN (ANALYZE, BUFFERS) " + text[0])
            if queries[0][2]:
                generic = generic_plan(queries[0][1], queries[0][2])
        transaction.set_rollback(True)
    report[figure] = {"status": getattr(response, "status_code", None), "queries": len(queries),
                      "top": [[round(q[0], 2), sql[:600]] for q, sql in zip(queries[:3], text)],
                      "sql": text[0] if text else "", "plan": plan, "generic": generic}
print(json.dumps(report))
"""


# --------------------------------------------------------------------------------------- seeding

def bulk_seed(dsn: str, closed: int, pending: int, sessions: int, try_sql: str = "", days: int = 60) -> dict[str, int]:
    """The seeded database's bulk rows (``tests.bench.seed``, one INSERT … SELECT per table: the
    agent's sessions, its bot's chats among them, their asks and the rest), then ``try_sql`` and
    VACUUM (ANALYZE). Returns the rows written per table."""
    import psycopg

    from tests.bench.seed import Size, seed

    written: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        if sessions:
            written = seed(conn, Size(closed=closed, pending=pending, sessions=sessions, days=days), agent=AGENT,
                           bot_app_id=APP_ID, progress=lambda line: say(f"  {line}"))
        if try_sql:
            conn.execute(try_sql)
            say(f"  ran {try_sql!r}")
        started = time.monotonic()
        conn.execute(f"SET statement_timeout = '{STEP_TIMEOUT}s'")
        conn.execute("VACUUM (ANALYZE)")
        say(f"  vacuum analyze in {time.monotonic() - started:.1f} s")
        counts = {table: conn.execute(f"SELECT count(*) FROM askcards_{table}").fetchone()[0]
                  for table in ("ask", "respondent", "askevent", "outboxevent", "session", "cardmessage")}
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))").fetchone()[0]
    say(f"  rows: {counts}; database size {size}")
    return written


# ---------------------------------------------------------------------------------------- figures


@dataclass
class Db:
    label: str  # "empty" / "seeded"
    name: str
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    key: str = ""
    cookie: dict[str, str] = field(default_factory=dict)
    pool: list[PendingSubmit] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    detail_ask: str = ""
    base: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)  # figure -> ms
    errors: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)


# figure -> (label, kind)
HTTP_FIGURES = {
    "healthz": "YARDSTICK GET /healthz",
    "callback": "Feishu callback (submit)",
    "tools_call": "POST /api/v1/tools/call",
    "asks_first": "GET /asks (first page, 50)",
    "asks_deep": "GET /asks?status=failed (a page of 50)",
    "asks_none": "GET /asks?status=reserved (no rows)",
    "asks_session": "GET /asks?session=<one session>",
    "events_first": "GET /events?after=0 (100)",
    "events_newest": "GET /events (newest 100)",
    "admin_list": "admin ask changelist",
    "admin_detail": "admin ask change page",
}
WORKER_FIGURES = {
    "sweep_idle": "worker deadline sweep, nothing due",
    "sweep_due": "worker deadline sweep, per expired ask",
    "card_claim_idle": "worker card-sync claim query, nothing due",
    "card_sync_pass": "worker card-sync pass, per pushed card",
    "purge_idle": "answer purge, nothing due",
    "purge_due": "answer purge, per purged ask",
}
PER_ITEM = {"sweep_due", "card_sync_pass", "purge_due"}


def http_spec(db: Db, figure: str, index: int) -> dict[str, Any]:
    """What one request of a figure sends on a database (``index``: its number in the run)."""
    api = {"api": True}
    if figure == "healthz":
        return {"kind": "get", "path": "/healthz"}
    if figure == "callback":
        return {"kind": "callback", "path": f"/callbacks/feishu/{APP_ID}/",
                "item": list(vars(db.pool[index]).values())}
    if figure == "tools_call":
        return {"kind": "tools_call", "path": "/api/v1/tools/call", **api,
                "body": {"session": db.keys[index % len(db.keys)], "name": "ask_user_questions",
                         "arguments": {"questions": QUESTIONS}, "timeout_seconds": 3600}}
    if figure == "asks_first":
        return {"kind": "get", "path": "/api/v1/asks?limit=50", **api}
    if figure == "asks_deep":
        return {"kind": "get", "path": "/api/v1/asks?status=failed&limit=50", **api}
    if figure == "asks_none":
        return {"kind": "get", "path": "/api/v1/asks?status=reserved&limit=50", **api}
    if figure == "asks_session":
        return {"kind": "get", "path": f"/api/v1/asks?session={db.keys[0]}&limit=50", **api}
    if figure == "events_first":
        return {"kind": "get", "path": "/api/v1/events?after=0&limit=100", **api}
    if figure == "events_newest":
        return {"kind": "get", "path": f"/api/v1/events?after={db.counts['newest_after']}&limit=100", **api}
    if figure == "admin_list":
        return {"kind": "get", "path": "/admin/askcards/ask/"}
    if figure == "admin_detail":
        return {"kind": "get", "path": f"/admin/askcards/ask/{admin_quote(db.detail_ask)}/change/"}
    raise ValueError(figure)


async def one_request(http: aiohttp.ClientSession, db: Db, spec: dict[str, Any]) -> tuple[float, str | None]:
    headers: dict[str, str] = {}
    if spec.get("api"):
        headers["Authorization"] = f"Bearer {db.key}"
    elif spec["path"].startswith("/admin/"):
        headers["Cookie"] = f"{db.cookie['cookie_name']}={db.cookie['session_key']}"
    kind = spec["kind"]
    started = time.monotonic()
    if kind == "callback":
        body, signed = submit_request(PendingSubmit(*spec["item"]))
        request = http.post(f"{db.base}{spec['path']}", data=body, headers=signed)
    elif kind == "tools_call":
        request = http.post(f"{db.base}{spec['path']}", json=spec["body"], headers=headers)
    else:
        request = http.get(f"{db.base}{spec['path']}", headers=headers, allow_redirects=False)
    async with request as resp:
        body = await resp.read()
        status = resp.status
    elapsed = (time.monotonic() - started) * 1000
    if kind == "callback":
        return elapsed, check_submit_response(status, body)
    if status != 200:
        return elapsed, f"HTTP {status}: {body[:200]!r}"
    if kind == "tools_call" and json.loads(body).get("status") != "pending":
        return elapsed, f"not pending: {body[:200]!r}"
    return elapsed, None


async def measure_http(args: argparse.Namespace, dbs: list[Db]) -> None:
    timeout = aiohttp.ClientTimeout(total=60)
    sessions = {db.label: aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=1))
                for db in dbs}
    used = {(db.label, figure): 0 for db in dbs for figure in HTTP_FIGURES}
    try:
        for figure in HTTP_FIGURES:
            count = args.callbacks if figure == "callback" else args.requests
            slow = False  # a warm-up request took over a second: fewer requests from then on
            for round_number in range(args.rounds):
                for db in dbs:
                    http = sessions[db.label]
                    if figure == "events_newest":
                        db.counts["newest_after"] = newest_after(db)
                    warmup = 3 if round_number == 0 and figure != "callback" else 0
                    number = 0
                    while number < warmup + max(1, (args.slow_requests if slow else count) // args.rounds):
                        index = used[(db.label, figure)]
                        used[(db.label, figure)] += 1
                        elapsed, error = await one_request(http, db, http_spec(db, figure, index))
                        if error:
                            db.errors.setdefault(figure, []).append(error)
                        elif number >= warmup:
                            db.samples.setdefault(figure, []).append(elapsed)
                        elif elapsed > 1000:
                            slow = True
                        number += 1
            empty, seeded = (sorted(db.samples.get(figure, [])) for db in dbs)
            say(f"  {HTTP_FIGURES[figure]:<45} p50 {percentile(empty, 50):8.1f} / {percentile(seeded, 50):8.1f} ms")
    finally:
        for http in sessions.values():
            await http.close()


def newest_after(db: Db) -> int:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/{db.name}", connect_timeout=5) as conn:
        seq = conn.execute("SELECT event_seq FROM askcards_agent WHERE name = %s", (AGENT,)).fetchone()[0]
    return max(0, seq - 100)


def run_script(db: Db, script: str, params: dict[str, Any]) -> Any:
    return last_json(run_python(db.env, script, json.dumps(params), timeout=STEP_TIMEOUT, what=f"[{db.label}] script"))


# ----------------------------------------------------------------------------------------- report


def ratio_line(label: str, empty: float, seeded: float, unit: str = "ms", target: bool = True,
               measured: list[Figure] | None = None) -> tuple[str, bool]:
    """The printed line of one figure (and, into ``measured``, its empty, seeded and ratio figures)."""
    ratio = seeded / empty if empty else float("inf")
    ok = ratio <= TARGET
    verdict = ("ok" if ok else "MISSED") if target else "yardstick"
    if measured is not None:
        measured += [Figure(f"{label}, empty", empty, unit), Figure(f"{label}, seeded", seeded, unit),
                     Figure(f"{label}, seeded / empty", ratio, "x", at_most(TARGET) if target else None)]
    return f"  {label:<48} {empty:9.2f} / {seeded:9.2f} {unit} = {ratio:5.2f}x  [{verdict}]", ok


def report(args: argparse.Namespace, dbs: list[Db], worker: dict[str, dict[str, Any]],
           measured: list[Figure]) -> list[str]:
    """Prints the figures (and puts them into ``measured``); returns the figures that missed the target."""
    empty, seeded = dbs
    missed: list[str] = []
    say()
    say(f"=== seeded: {args.closed:,} closed asks, {args.pending:,} pending asks, {args.sessions:,} sessions; "
        f"{args.rounds} alternating rounds; target seeded / empty <= {TARGET}x (p50; p99 too for callbacks)")
    say(f"    load average now {os.getloadavg()[0]:.2f} (start {args.load_start:.2f}); "
        "the machine is shared: figures are noisy")
    for figure, label in HTTP_FIGURES.items():
        a, b = sorted(empty.samples.get(figure, [])), sorted(seeded.samples.get(figure, []))
        if not a or not b:
            say(f"  {label:<48} no samples")
            measured.append(Figure(f"{label} p50, seeded / empty", float("nan"), "x", at_most(TARGET)))
            missed.append(figure)
            continue
        line, ok = ratio_line(f"{label} p50", percentile(a, 50), percentile(b, 50), target=figure != "healthz",
                              measured=measured)
        say(line + f"   (p99 {percentile(a, 99):.1f} / {percentile(b, 99):.1f}, n={len(a)}/{len(b)})")
        if figure == "callback":
            line99, ok99 = ratio_line(f"{label} p99", percentile(a, 99), percentile(b, 99), measured=measured)
            say(line99)
            ok = ok and ok99
        if figure != "healthz" and not ok:
            missed.append(figure)
    for figure, label in WORKER_FIGURES.items():
        a, b = worker[empty.label][figure], worker[seeded.label][figure]
        per = figure in PER_ITEM
        value_a = statistics.median(a["ms"]) / max(1, a.get("count", 1)) if per else statistics.median(a["ms"])
        value_b = statistics.median(b["ms"]) / max(1, b.get("count", 1)) if per else statistics.median(b["ms"])
        line, ok = ratio_line(label, value_a, value_b, measured=measured)
        extra = f"   ({a.get('count')} / {b.get('count')} items)" if per else f"   (median of {len(a['ms'])})"
        say(line + extra)
        if per:
            for db, found in ((empty, a), (seeded, b)):
                say(f"      [{db.label}] {found['statements']} statements; ms by statement shape (total, count):")
                for total, count, shape in found["shapes"]:
                    say(f"        {total:8.1f} ms {count:5d}x  {shape}")
        if not ok:
            missed.append(figure)
    for db in dbs:
        for figure, errors in db.errors.items():
            say(f"  [{db.label}] {figure}: {len(errors)} errors, e.g. {errors[0][:300]}")
    return missed


# ------------------------------------------------------------------------------------------- main


def prepare(db: Db, stub_base: str) -> None:
    run_manage(db.env, "migrate", "--no-input", "-v", "0")
    run_manage(db.env, "askcards_bot", "add", "feishu", "--app-id", APP_ID, "--app-secret", APP_SECRET,
               "--verification-token", VERIFICATION_TOKEN, "--encrypt-key", ENCRYPT_KEY, "--base-url", stub_base,
               "--name", "bench")
    # The agent is not granted the staff user: the user only reads the admin's pages.
    fixture = seed_fixture(db.env, [USERNAME], agent=AGENT, grant=False, password=PASSWORD, superuser=True)
    db.key = fixture.key
    db.cookie = {"cookie_name": fixture.cookie_name, "session_key": fixture.sessions[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--closed", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="50,000 closed / 5,000 pending / 500 sessions")
    parser.add_argument("--requests", type=int, default=60, help="requests per HTTP figure and database")
    parser.add_argument("--slow-requests", type=int, default=10,
                        help="requests per database for a figure whose warm-up took over a second")
    parser.add_argument("--callbacks", type=int, default=200, help="Feishu submits per database")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per figure")
    parser.add_argument("--reps", type=int, default=30, help="repetitions of an idle worker step")
    parser.add_argument("--due", type=int, default=100, help="asks made due for the deadline sweep")
    parser.add_argument("--explain", default="missed", help="'missed', 'all', 'none' and/or figure names, "
                        "comma-separated (e.g. missed,asks_deep)")
    parser.add_argument("--keep", action="store_true", help="keep the databases and data dirs")
    parser.add_argument("--try-sql", default="", help="SQL run on both databases after the seeding, before the "
                        "statistics are taken (e.g. a CREATE INDEX to try)")
    add_rounds_argument(parser, "--runs")
    args = parser.parse_args(argv)
    check_rounds(parser, args.repeat, "--runs")
    if args.quick:
        args.closed, args.pending, args.sessions = QUICK["closed"], QUICK["pending"], QUICK["sessions"]
    if args.callbacks + 1 > PER_CARD * 400:
        parser.error("--callbacks: at most 1999")
    if args.sessions < 1 or args.closed < 0 or args.pending < 0 or args.rounds < 1:
        parser.error("--sessions must be at least 1, --closed and --pending at least 0, --rounds at least 1")
    why = pg_available()
    if why:
        say(f"cannot run: {why}")
        return 2
    run_rounds("askcards scale benchmark (empty vs seeded database)", args.repeat, lambda _: one_run(args),
               word="run", note=f"{args.closed:,} closed asks, {args.pending:,} pending, {args.sessions:,} sessions; "
                                f"target: each figure seeded / empty <= {TARGET}x")
    return 0


def one_run(args: argparse.Namespace) -> list[Figure]:
    """Fresh databases, seeding, servers and the whole measurement, printed; its figures."""
    args.load_start = os.getloadavg()[0]
    measured: list[Figure] = []
    stem = f"askcards_scale_{secrets.token_hex(4)}"
    root = Path(tempfile.mkdtemp(prefix="askcards-bench-scale-"))
    dbs = [Db("empty", f"{stem}_empty", root / "empty"), Db("seeded", f"{stem}_seeded", root / "seeded")]
    created: list[str] = []
    procs = Processes(root)
    try:
        base_env = {k: v for k, v in os.environ.items()
                    if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "ALLOWED_HOSTS"}}
        stub = procs.start("stub", [PYTHON, "-m", "tests.bench.feishu_stub"], base_env, capture_stdout=True)
        stub_base = f"http://{HOST}:{read_stub_port(stub)}"
        for db in dbs:
            db.data_dir.mkdir()
            pg_admin(f"CREATE DATABASE {db.name}")
            created.append(db.name)
            db.env = bench_env(db.data_dir, DATABASE_URL=f"{PG_SERVER}/{db.name}")
            say(f"[{db.label}] database {db.name}, data dir {db.data_dir}")
            prepare(db, stub_base)
        say(f"[seeded] bulk rows: {args.closed:,} closed asks, {args.pending:,} pending, {args.sessions:,} sessions")
        started = time.monotonic()
        bulk_seed(f"{PG_SERVER}/{dbs[1].name}", args.closed, args.pending, args.sessions, args.try_sql)
        if args.try_sql:
            bulk_seed(f"{PG_SERVER}/{dbs[0].name}", 0, 0, 0, args.try_sql)
        say(f"[seeded] bulk seeding took {time.monotonic() - started:.0f} s")
        cards = -(-(args.callbacks + 1) // PER_CARD)
        for db in dbs:
            hot = seed_cards(db.env, cards, PER_CARD, agent=AGENT, label="hot", timeout=STEP_TIMEOUT)
            run_script(db, FAILED_SEED, {"agent": AGENT, "questions": QUESTIONS, "failed": FIXTURE_FAILED})
            db.pool = [PendingSubmit(*row) for row in hot["asks"]]
            db.detail_ask = db.pool.pop().ask_id
            db.keys = hot["keys"]
            say(f"[{db.label}] hot fixture: {len(db.pool) + 1} pending asks on {cards} live cards")
        for db in dbs:
            port = free_port()
            db.base = f"http://{HOST}:{port}"
            procs.start(f"server-{db.label}", [PYTHON, "-m", "daphne", "-v", "0", "-b", HOST, "-p", str(port),
                                               "project.asgi:application"], db.env)
        for db in dbs:
            asyncio.run(wait_until_serving(db.base, procs.alive))
        say("HTTP figures (p50, empty / seeded):")
        asyncio.run(asyncio.wait_for(measure_http(args, dbs), STEP_TIMEOUT))
        worker: dict[str, dict[str, Any]] = {}
        for db in dbs:
            worker[db.label] = run_script(db, WORKER, {"reps": args.reps, "due": args.due,
                                                       "hot_prefix": f"feishu-{APP_ID}-private-ou_hot"})
        missed = report(args, dbs, worker, measured)
        named = {"missed": missed, "all": [*HTTP_FIGURES, *WORKER_FIGURES], "none": []}
        wanted = list(dict.fromkeys(figure for name in args.explain.split(",") for figure in named.get(name, [name])))
        explainable = [f for f in wanted if f in HTTP_FIGURES and f != "healthz" or f in WORKER_FIGURES]
        if explainable:
            seeded = dbs[1]
            seeded.counts["newest_after"] = newest_after(seeded)
            # The last hot ask was never answered; each in-process run is rolled back.
            figures = {f: http_spec(seeded, f, len(seeded.pool) - 1) if f in HTTP_FIGURES
                       else {"kind": "sql", "sql": worker[seeded.label][f]["slowest"]} if f in PER_ITEM
                       else {"kind": f} for f in explainable}
            plans = run_script(seeded, EXPLAIN, {"figures": figures, "explain": explainable, "key": seeded.key,
                                                 **seeded.cookie})
            for figure, found in plans.items():
                label = HTTP_FIGURES.get(figure) or WORKER_FIGURES[figure]
                status = f" (HTTP {found['status']})" if found["status"] else ""
                if not found["queries"]:
                    say(f"\n--- {label}{status}: no statements on this thread's connection (the view runs its "
                        "database work in a worker thread); nothing to explain")
                    continue
                say(f"\n--- {label} on the seeded database{status}: {found['queries']} statements; slowest (ms, SQL):")
                for ms, sql in found["top"]:
                    say(f"  {ms} ms  {sql}")
                say("EXPLAIN (ANALYZE, BUFFERS) of the slowest, with its values (a custom plan):")
                say(found["plan"])
                if found["generic"]:
                    say("the same as a prepared statement's generic plan (the server's pooled connections prepare "
                        "a statement after 5 runs; PostgreSQL may then plan it once for any values):")
                    say(found["generic"])
        return measured
    except BaseException:
        for name, _, _ in procs.started:
            tail = procs.tail(name)
            if tail.strip():
                say(f"--- {name} log tail ---\n{tail}\n---")
        raise
    finally:
        procs.stop_all()
        if not args.keep:
            for name in created:
                try:
                    pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                except Exception as exc:  # noqa: BLE001 - report, keep cleaning up
                    say(f"could not drop database {name}: {exc}")
            shutil.rmtree(root, ignore_errors=True)
        else:
            say(f"kept {root} and databases {', '.join(created)}")


if __name__ == "__main__":
    raise SystemExit(main())
