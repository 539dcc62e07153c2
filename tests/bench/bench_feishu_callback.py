"""Feishu callback benchmark: signed + encrypted ``card.action.trigger`` submits against a trivial view.

Run from the project directory (not collected by pytest: the file is not named test_*):

    .venv/bin/python -m tests.bench.bench_feishu_callback [--seconds 20] [--clients 5,50] [--targets sqlite,postgres]

Per target, every step bounded in time and count, every connection to 127.0.0.1 only:

1. A throwaway data dir; for ``postgres`` also a throwaway database ``askcards_bench`` (dropped first
   if a previous run left it, dropped again at the end). ``REDIS_URL`` is removed from the
   environment: wakes and cache are in-process in both targets.
2. A Feishu stand-in (``tests/bench/feishu_stub.py``, its own process) that answers the tenant
   token, card sends and PATCHes with Feishu-like success, so the worker's card-sync lane never
   retries errors during the run.
3. ``migrate``, ``askcards_bot add feishu`` (verification token, encrypt key, ``--base-url`` the
   stub), ``askcards_agent create``; then one seeding process (``services`` calls, as the API
   would make them): Feishu p2p sessions (``feishu-<app>-private-<open_id>``), each with a
   running progress card (``services.progress_put``) and ``--asks-per-card`` pending
   ``ask_user_questions`` asks (``services.tool_call``), enough for every submit of the run to
   answer a different ask. The cards are then marked as already sent (message id
   ``om_bench_<pk>``, synced version = version), standing for cards that are live on Feishu.
4. The server: ``sqlite``: ``manage.py serve`` (one process: daphne + the worker's lanes);
   ``postgres``: ``daphne -b 127.0.0.1 -p PORT project.asgi:application`` plus a separate
   ``manage.py askcards_worker``, both with ``DATABASE_URL=postgres://…/askcards_bench``.
5. For each client count: ``GET /healthz`` (the trivial view: plain Django function view, no
   database) for ``--healthz-seconds``; then signed and encrypted submits to
   ``POST /callbacks/feishu/<app_id>/`` for ``--seconds``, each with a fresh ``event_id``, the
   current timestamp, its own nonce and signature, answering the next pending ask (round-robin over
   the cards, so concurrent submits mostly land on different cards). Every response must be HTTP
   200 with toast ``已提交`` (type success) and a card; anything else is counted as an error.
   Between phases the benchmark waits for the server and worker to go idle (the card PATCHes the
   submits caused are pushed to the stub).
6. The server, worker and stub are stopped (SIGTERM, then kill), the data dir and the database
   removed, always.

Figures are printed, not asserted; see docs/performance.md for the targets. ``--rounds N`` runs
all of it N times (every target from a fresh data dir, database and server) and ends with the
min / median / max of every figure over the rounds (tests/bench/common.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from askcards.surfaces.feishu import security
from tests.bench import NO_QUOTAS
from tests.bench.bench_longpoll import (
    HOST,
    PROJECT_DIR,
    PYTHON,
    Profiler,
    free_port,
    percentile,
    proc_cpu_seconds,
    raise_nofile_limit,
    run_manage,
    say,
)
from tests.bench.common import (
    Figure, add_rounds_argument, analyze, at_least, at_most, below, check_rounds, exactly, run_rounds,
)

SETUP_TIMEOUT = 300  # seconds for the seeding process
START_TIMEOUT = 60
STOP_TIMEOUT = 15
APP_ID = "cli_bench"
APP_SECRET = "bench-app-secret"
VERIFICATION_TOKEN = "vt-bench-token"
ENCRYPT_KEY = "ek-bench-encrypt-key"
AGENT = "bench"
TOAST_SUBMITTED = "已提交"
PG_SERVER = "postgres://postgres@127.0.0.1:5432"
PG_DATABASE = "askcards_bench"
TARGETS = ("sqlite", "postgres")
SHARE_TARGET = 0.50  # callback throughput over /healthz's, at least
CPU_TARGET = 3.0  # CPU per submit over a /healthz's, at most
P99_TARGET = 3.0  # callback p99 over /healthz's at the smallest client count, at most
P99_MS_TARGET = 1000.0  # far below Feishu's 3 s

# Two questions per ask, as an agent typically asks: a single select and a multi select.
QUESTIONS = [
    {
        "question": "Which database should the service use in production?",
        "header": "Database",
        "options": [
            {"label": "PostgreSQL", "description": "Relational, the scale-out choice"},
            {"label": "SQLite", "description": "Embedded, one process"},
            {"label": "MySQL"},
        ],
    },
    {
        "question": "Which caches should sit in front of it?",
        "header": "Cache",
        "multiSelect": True,
        "options": [{"label": "Redis"}, {"label": "Memcached"}, {"label": "Local memory"}],
    },
]

# Live cards to answer, made by the services as the API would (bench_scale's hot fixture too):
# ``cards`` Feishu p2p sessions ``feishu-<app>-private-ou_<label>_<n>``, each with a running
# progress card and ``per_card`` pending asks; then the cards count as sent and in sync (message
# id ``om_<label>_<pk>``): a run measures callbacks, not the first sends. Prints one JSON line:
# the asks (round-robin over the cards, so consecutive submits land on different cards), the
# session keys, how many of their asks are pending, and the seconds it took (seed_cards runs it).
SEED = r"""
import json, sys, time, django
django.setup()
from django.db import transaction
from django.db.models import CharField, F, Value
from django.db.models.functions import Cast, Concat
from askcards import services
from askcards.models import Agent, Ask, Bot, CardMessage

params = json.loads(sys.argv[1])
agent = Agent.objects.get(name=params["agent"])
bot = Bot.objects.get(platform="feishu", app_id=params["app_id"])
services.agent_bot_grant(agent=agent, bot=bot, actor="bench")
per_card, cards, label, chunk = params["per_card"], params["cards"], params["label"], 20
prefix = f"feishu-{bot.app_id}-private-ou_{label}_"
started = time.monotonic()
by_card, keys = [], []
for first in range(0, cards, chunk):
    with transaction.atomic():
        for number in range(first, min(cards, first + chunk)):
            key = f"{prefix}{number:05d}"
            session, _ = services.session_upsert(agent=agent, key=key, bot=bot)
            services.progress_put(session=session, status="running", title=f"{label.title()} task {number}",
                                  content="Working on the benchmark task: **step 3 of 5**, reading the logs.")
            asks = []
            for _ in range(per_card):
                out = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                         arguments={"questions": params["questions"]}, timeout_seconds=3600)
                if out.status != "pending" or out.ask is None:
                    raise SystemExit(f"seed ask not pending: {out.status} {out.tool_result}")
                asks.append(out.ask.id)
            by_card.append((session.id, session.user_id, asks))
            keys.append(key)
cards_sent = CardMessage.objects.filter(bot=bot, progress_card__session__key__startswith=prefix)
cards_sent.update(
    message_id=Concat(Value(f"om_{label}_"), Cast("id", CharField())), synced_version=F("version"), next_sync_at=None
)
messages = dict(cards_sent.values_list("progress_card__session_id", "message_id"))
pending = Ask.objects.filter(status=Ask.Status.PENDING, session__key__startswith=prefix).count()
order = []
for position in range(per_card):  # round-robin over the cards
    for session_id, user_id, asks in by_card:
        order.append([asks[position], session_id, user_id, messages[session_id], position])
print(json.dumps({"asks": order, "keys": keys, "pending": pending, "seconds": time.monotonic() - started}))
"""


# ----------------------------------------------------------------------------------------- helpers


@dataclass
class PendingSubmit:
    ask_id: str
    session_id: str
    open_id: str
    message_id: str
    form: int  # n of the form on the card (ask_{n}, q{n}_{i}, submit_{n})


@dataclass
class Phase:
    name: str
    clients: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests only
    errors: dict[str, int] = field(default_factory=dict)
    error_examples: list[str] = field(default_factory=list)
    exhausted_after: float | None = None
    server_cpu: float = 0.0
    worker_cpu: float = 0.0
    postgres_cpu: float | None = None  # the benchmark database's backends only
    backends_ended: int = 0
    client_cpu: float = 0.0
    stub_cpu: float = 0.0
    patches: int = 0  # card PATCHes the stub received during the phase and its drain
    drain_seconds: float = 0.0

    @property
    def ok(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def pct(self, value: float) -> float:
        return percentile(self.latencies, value) * 1000

    @property
    def service_cpu_ms(self) -> float:
        """CPU per passing request across the server, the worker and PostgreSQL (what serving it
        cost askcards' side: not the benchmark's clients nor the Feishu stand-in), in ms."""
        total = self.server_cpu + self.worker_cpu + (self.postgres_cpu or 0.0)
        return total / self.ok * 1000 if self.ok else float("nan")

    def error(self, kind: str, example: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if len(self.error_examples) < 3:
            self.error_examples.append(f"{kind}: {example[:300]}")


@dataclass
class TargetResult:
    target: str
    note: str = ""
    skipped: str = ""
    seeded: int = 0
    seed_seconds: float = 0.0
    cards: int = 0
    phases: list[tuple[Phase, Phase]] = field(default_factory=list)  # (healthz, callback) per client count
    load_start: float = 0.0
    load_end: float = 0.0


def postgres_backends(database: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to ``database`` (its process title
    names the database): only this run's queries, whatever else uses the same PostgreSQL."""
    backends = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                title = fh.read().replace(b"\0", b" ").decode(errors="replace").split()
            if len(title) < 4 or title[0] != "postgres:" or title[3] != database:
                continue  # "postgres: 15/main: <user> <database> <client> <state>"
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        backends[int(entry)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return backends


def postgres_cpu_between(before: dict[int, float], after: dict[int, float]) -> tuple[float, int]:
    """CPU the database's backends used between two ``postgres_backends`` readings, and how many
    backends ended in between (their last stretch is not counted: the figure is then a floor).
    The server and the worker keep pooled connections, so backends rarely end mid-phase."""
    used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    return used, len(set(before) - set(after))


def own_cpu_seconds() -> float:
    usage = os.times()
    return usage.user + usage.system


def submit_request(item: PendingSubmit) -> tuple[bytes, dict[str, str]]:
    """What Feishu POSTs for one click on the form's submit button: encrypted body, signed headers."""
    n = item.form
    now = time.time()
    payload = {
        "schema": "2.0",
        "header": {
            "event_id": uuid.uuid4().hex,
            "token": VERIFICATION_TOKEN,
            "create_time": str(int(now * 1_000_000)),
            "event_type": "card.action.trigger",
            "tenant_key": "tk_bench",
            "app_id": APP_ID,
        },
        "event": {
            "operator": {"tenant_key": "tk_bench", "open_id": item.open_id, "union_id": f"on_{item.open_id[3:]}"},
            "token": f"c-{secrets.token_hex(16)}",
            "action": {
                "value": {"kind": "feishu_ask", "act": "submit", "sessionId": item.session_id,
                          "requestId": item.ask_id, "sender": item.open_id},
                "tag": "button",
                "name": f"submit_{n}",
                "form_value": {f"q{n}_0": "1", f"c{n}_0": "", f"q{n}_1": ["0", "2"], f"c{n}_1": "and a CDN"},
            },
            "host": "im_message",
            "context": {"open_message_id": item.message_id, "open_chat_id": f"oc_{item.open_id[3:]}"},
        },
    }
    body = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(payload, ensure_ascii=False))}).encode()
    timestamp, nonce = str(int(now)), secrets.token_hex(8)
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Lark-Request-Timestamp": timestamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": security.signature(timestamp, nonce, ENCRYPT_KEY, body),
    }
    return body, headers


def check_submit_response(status: int, body: bytes) -> str | None:
    """None when the response is what Feishu needs for a successful submit, else what is wrong."""
    if status != 200:
        return f"HTTP {status}"
    try:
        data = json.loads(body)
    except ValueError:
        return "not JSON"
    toast = data.get("toast") if isinstance(data, dict) else None
    if not isinstance(toast, dict):
        return "no toast"
    if toast.get("content") != TOAST_SUBMITTED or toast.get("type") != "success":
        return f"toast {toast.get('type')} {toast.get('content')}"
    card = data.get("card")
    if not isinstance(card, dict) or card.get("type") != "raw" or not isinstance(card.get("data"), dict):
        return "no card"
    return None


# ------------------------------------------------------------------------------------- processes


class Processes:
    """Every process the benchmark starts, stopped (SIGTERM, then kill) in reverse order."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.started: list[tuple[str, subprocess.Popen, Any]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str], *,
              capture_stdout: bool = False) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb")
        proc = subprocess.Popen(
            argv, cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE if capture_stdout else log,
            stderr=log if capture_stdout else subprocess.STDOUT, start_new_session=True,
        )
        self.started.append((name, proc, log))
        return proc

    def alive(self) -> None:
        for name, proc, _ in self.started:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited early with code {proc.returncode}")

    def tail(self, name: str, size: int = 3000) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_bytes()[-size:].decode(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        for name, proc, log in reversed(self.started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
            log.close()
        self.started.clear()


def read_stub_port(stub: subprocess.Popen) -> int:
    """The stub prints ``listening <port>`` when ready; wait for that line (bounded)."""
    assert stub.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    os.set_blocking(stub.stdout.fileno(), False)
    buffer = b""
    while time.monotonic() < deadline:
        if stub.poll() is not None:
            raise RuntimeError(f"the Feishu stub exited early with code {stub.returncode}")
        chunk = stub.stdout.read()
        if chunk:
            buffer += chunk
            for line in buffer.decode(errors="replace").splitlines():
                if line.startswith("listening "):
                    return int(line.split()[1])
        time.sleep(0.05)
    raise RuntimeError("the Feishu stub did not start")


def pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


def pg_available() -> str:
    """'' when PostgreSQL at 127.0.0.1:5432 accepts the postgres user, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute("select 1")
    except Exception as exc:  # noqa: BLE001 - any failure means: skip the target
        detail = " ".join(str(exc).split())[:160]
        return f"PostgreSQL at {PG_SERVER} is not usable ({type(exc).__name__}: {detail})"
    return ""


# ---------------------------------------------------------------------------------------- phases


async def wait_until_serving(base: str, procs: Processes) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while time.monotonic() < deadline:
            procs.alive()
            try:
                async with http.get(f"{base}/healthz") as resp:
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"server did not answer /healthz within {START_TIMEOUT} s")


async def wait_idle(pids: list[int], timeout: float, window: float = 0.5, max_share: float = 0.05) -> float:
    """Wait until every pid uses < max_share of a core over ``window``; returns seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = [proc_cpu_seconds(pid) for pid in pids]
        await asyncio.sleep(window)
        if all((proc_cpu_seconds(pid) - b) / window < max_share for pid, b in zip(pids, before)):
            break
    return time.monotonic() - start


async def stub_stats(http: aiohttp.ClientSession, stub_base: str) -> dict[str, int]:
    async with http.get(f"{stub_base}/stats") as resp:
        return await resp.json()


async def run_phase(phase: Phase, seconds: float, request) -> None:
    """``phase.clients`` keep-alive clients, each sending its next request as soon as the last returns."""
    connector = aiohttp.TCPConnector(limit=phase.clients, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        start = time.monotonic()
        deadline = start + seconds
        stopped = [False]

        async def client() -> None:
            while time.monotonic() < deadline and not stopped[0]:
                prepared = request()
                if prepared is None:  # no pending ask left
                    if phase.exhausted_after is None:
                        phase.exhausted_after = time.monotonic() - start
                    stopped[0] = True
                    return
                method, url, body, headers, check = prepared
                t0 = time.monotonic()
                try:
                    async with http.request(method, url, data=body, headers=headers) as resp:
                        payload = await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    phase.error(type(exc).__name__, str(exc))
                    await asyncio.sleep(0.05)
                    continue
                elapsed = time.monotonic() - t0
                problem = check(status, payload)
                if problem is None:
                    phase.latencies.append(elapsed)
                else:
                    phase.error(problem, payload.decode(errors="replace"))

        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(phase.clients))), seconds + 40)
        phase.seconds = time.monotonic() - start
    phase.latencies.sort()


async def measure(args: argparse.Namespace, result: TargetResult, base: str, stub_base: str, procs: Processes,
                  server: subprocess.Popen, worker: subprocess.Popen | None, stub: subprocess.Popen,
                  pool: deque[PendingSubmit]) -> None:
    await wait_until_serving(base, procs)
    pids = [server.pid] + ([worker.pid] if worker else [])
    await wait_idle(pids, 30)
    callback_url = f"{base}/callbacks/feishu/{APP_ID}/"

    def healthz_request():
        return "GET", f"{base}/healthz", None, None, lambda status, body: (
            None if status == 200 and body == b"ok" else f"HTTP {status}")

    def submit():
        if not pool:
            return None
        body, headers = submit_request(pool.popleft())
        return "POST", callback_url, body, headers, check_submit_response

    profiler = Profiler(args.profile and f"{args.profile}-{result.target}", server.pid, args.profile_gil)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        for clients in args.clients:
            phases = []
            for name, seconds, request in (("healthz", args.healthz_seconds, healthz_request),
                                           ("callback", args.seconds, submit)):
                procs.alive()
                phase = Phase(name, clients)
                patches_before = (await stub_stats(http, stub_base)).get("patch", 0)
                cpu = [proc_cpu_seconds(pid) for pid in pids]
                stub_cpu = proc_cpu_seconds(stub.pid)
                own = own_cpu_seconds()
                pg_cpu = postgres_backends(PG_DATABASE) if result.target == "postgres" else None
                if name == "callback":
                    profiler.start(f"c{clients}")
                say(f"  {result.target}: {name}, {clients} clients, {seconds:.0f} s …")
                await run_phase(phase, seconds, request)
                phase.client_cpu = own_cpu_seconds() - own
                profiler.stop()
                phase.drain_seconds = await wait_idle(pids, 60)
                phase.server_cpu = proc_cpu_seconds(server.pid) - cpu[0]
                phase.worker_cpu = proc_cpu_seconds(worker.pid) - cpu[1] if worker else 0.0
                phase.stub_cpu = proc_cpu_seconds(stub.pid) - stub_cpu
                if pg_cpu is not None:
                    phase.postgres_cpu, phase.backends_ended = postgres_cpu_between(pg_cpu, postgres_backends(PG_DATABASE))
                phase.patches = (await stub_stats(http, stub_base)).get("patch", 0) - patches_before
                say(f"    {phase.ok} ok in {phase.seconds:.1f} s = {phase.rps:.0f}/s, p50 {phase.pct(50):.1f} ms, "
                    f"p99 {phase.pct(99):.1f} ms, errors {sum(phase.errors.values())}"
                    + (f", pool exhausted after {phase.exhausted_after:.1f} s" if phase.exhausted_after else ""))
                phases.append(phase)
            result.phases.append((phases[0], phases[1]))
        stats = await stub_stats(http, stub_base)
    if stats.get("unknown"):
        result.note += f" stub saw {stats['unknown']} unexpected requests;"


def seed_cards(env: dict[str, str], cards: int, per_card: int, *, label: str = "bench",
               timeout: float = SETUP_TIMEOUT) -> dict[str, Any]:
    """Run SEED in its own process against ``env``'s database (agent AGENT, the bot of APP_ID)."""
    params = {"agent": AGENT, "app_id": APP_ID, "cards": cards, "per_card": per_card, "questions": QUESTIONS,
              "label": label}
    proc = subprocess.run([PYTHON, "-c", SEED, json.dumps(params)], cwd=PROJECT_DIR, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"seeding failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_target(args: argparse.Namespace, target: str) -> TargetResult:
    result = TargetResult(target)
    if target == "postgres":
        why = pg_available()
        if why:
            result.skipped = why
            say(f"skipping postgres: {why}")
            return result
    data_dir = Path(tempfile.mkdtemp(prefix=f"askcards-bench-feishu-{target}-"))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "ALLOWED_HOSTS"}}
    env.update({
        "ASKCARDS_DATA_DIR": str(data_dir),
        "ASKCARDS_SECRET_KEY": "bench",
        # One load generator on 127.0.0.1 stands for thousands of clients: no per-peer cap.
        "ASKCARDS_PEER_CONNECTIONS": "0",
        "DJANGO_SETTINGS_MODULE": args.settings,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    })
    database_created = False
    procs = Processes(data_dir)
    try:
        if target == "postgres":
            pg_admin(f"DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)")
            pg_admin(f"CREATE DATABASE {PG_DATABASE}")
            database_created = True
            env["DATABASE_URL"] = f"{PG_SERVER}/{PG_DATABASE}"
        say(f"[{target}] setup in {data_dir}")
        stub = procs.start("stub", [PYTHON, "-m", "tests.bench.feishu_stub"], env, capture_stdout=True)
        stub_base = f"http://{HOST}:{read_stub_port(stub)}"
        run_manage(env, "migrate", "--no-input", "-v", "0")
        run_manage(env, "askcards_bot", "add", "feishu", "--app-id", APP_ID, "--app-secret", APP_SECRET,
                   "--verification-token", VERIFICATION_TOKEN, "--encrypt-key", ENCRYPT_KEY, "--base-url", stub_base,
                   "--name", "bench")
        run_manage(env, "askcards_agent", "create", AGENT, "--json")
        run_manage(env, "askcards_agent", "quotas", AGENT, *NO_QUOTAS)
        total = args.asks or args.asks_per_level * len(args.clients)
        per_card = args.asks_per_card or total
        cards = -(-total // per_card)
        seeded = seed_cards(env, cards, per_card)
        if target == "postgres":
            analyze(env["DATABASE_URL"])  # statistics, as autovacuum keeps them (common.analyze)
        pool = deque(PendingSubmit(*row) for row in seeded["asks"])
        result.seeded, result.seed_seconds, result.cards = len(pool), seeded["seconds"], cards
        if seeded["pending"] != len(pool):
            raise RuntimeError(f"seeded {len(pool)} asks but {seeded['pending']} are pending")
        say(f"[{target}] seeded {len(pool)} pending asks on {cards} live cards in {result.seed_seconds:.1f} s")

        port = args.port or free_port()
        base = f"http://{HOST}:{port}"
        worker = None
        if target == "sqlite":
            server = procs.start("server", [PYTHON, "manage.py", "serve", f"{HOST}:{port}", "--no-migrate",
                                            *(["--no-worker"] if args.no_worker else [])], env)
            worker_off = ", worker OFF" if args.no_worker else ""
            result.note += f" serve (one process: daphne + worker lanes){worker_off};"
        else:
            server = procs.start("server", [PYTHON, "-m", "daphne", "-v", "0", "-b", HOST, "-p", str(port),
                                            "project.asgi:application"], env)
            if not args.no_worker:
                worker = procs.start("worker", [PYTHON, "manage.py", "askcards_worker"], env)
            result.note += " daphne + " + ("askcards_worker process;" if worker else "NO worker;")
        say(f"[{target}] server pid {server.pid} on {base}" + (f", worker pid {worker.pid}" if worker else ""))
        result.load_start = os.getloadavg()[0]
        asyncio.run(asyncio.wait_for(measure(args, result, base, stub_base, procs, server, worker, stub, pool),
                                     len(args.clients) * (args.seconds + args.healthz_seconds + 200) + 120))
        result.load_end = os.getloadavg()[0]
        return result
    except BaseException:
        for name in ("server", "worker", "stub"):
            tail = procs.tail(name)
            if tail.strip():
                say(f"--- {target} {name} log tail ---\n{tail}\n---")
        raise
    finally:
        procs.stop_all()
        if database_created and not args.keep:
            try:
                pg_admin(f"DROP DATABASE IF EXISTS {PG_DATABASE} WITH (FORCE)")
            except Exception as exc:  # noqa: BLE001 - report, keep cleaning up
                say(f"could not drop database {PG_DATABASE}: {exc}")
        if args.keep:
            say(f"kept {data_dir}" + (f" and database {PG_DATABASE}" if database_created else ""))
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------- report


def mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def print_report(args: argparse.Namespace, results: list[TargetResult]) -> None:
    say()
    say("=== askcards Feishu callback benchmark: signed + encrypted card.action.trigger submits vs GET /healthz ===")
    say(f"cores {os.cpu_count()}; callbacks {args.seconds:.0f} s and /healthz {args.healthz_seconds:.0f} s per client "
        f"count, keep-alive clients on this same machine (they, the stub and PostgreSQL share its cores)")
    for r in results:
        if r.skipped:
            say(f"\n[{r.target}] SKIPPED: {r.skipped}")
            continue
        say(f"\n[{r.target}]{r.note} {r.seeded} asks seeded on {r.cards} cards "
            f"({args.asks_per_card or r.seeded} per card) "
            f"in {r.seed_seconds:.1f} s; load average {r.load_start:.1f} at start, {r.load_end:.1f} at end")
        say(f"  {'clients':>7} {'view':<9} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"{'ok':>6} {'errors':>6} "
            f"{'srv CPU':>8} {'wrk CPU':>8} {'pg CPU':>8} {'cli CPU':>8} {'stub CPU':>8} {'PATCHes':>7} {'CPU/req':>8}")
        for healthz, callback in r.phases:
            for phase in (healthz, callback):
                biggest = phase.latencies[-1] * 1000 if phase.latencies else float("nan")
                say(f"  {phase.clients:>7} {phase.name:<9} {phase.rps:>7.1f} "
                    f"{phase.pct(50):>8.1f} {phase.pct(99):>8.1f} "
                    f"{biggest:>8.1f} {phase.ok:>6} {sum(phase.errors.values()):>6} {phase.server_cpu:>7.1f}s "
                    f"{phase.worker_cpu:>7.1f}s "
                    + (f"{phase.postgres_cpu:>7.1f}s " if phase.postgres_cpu is not None else f"{'-':>8} ")
                    + f"{phase.client_cpu:>7.1f}s {phase.stub_cpu:>7.1f}s {phase.patches:>7} "
                    f"{phase.service_cpu_ms:>5.1f} ms")
                for example in phase.error_examples:
                    say(f"      e.g. {example}")
                if phase.backends_ended:
                    say(f"      {phase.backends_ended} PostgreSQL backends ended during the phase: pg CPU is a floor")
                if phase.exhausted_after is not None:
                    say(f"      the pending asks ran out after {phase.exhausted_after:.1f} s (raise --asks-per-level)")
        say("  targets (printed, not asserted):")
        for healthz, callback in r.phases:
            share, cost, factor = ratios(healthz, callback)
            line = (f"    {callback.clients:>2} clients: CPU per submit {callback.service_cpu_ms:.1f} ms = {cost:.1f}x "
                    f"a /healthz's {healthz.service_cpu_ms:.1f} ms (<= {CPU_TARGET:g}x) [{mark(cost <= CPU_TARGET)}]; "
                    f"callback throughput {share:.0%} of /healthz (>= {SHARE_TARGET:.0%}) "
                    f"[{mark(share >= SHARE_TARGET)}]; ")
            if callback.clients == min(args.clients):
                line += f"p99 {factor:.1f}x /healthz's (<= {P99_TARGET:g}x) [{mark(factor <= P99_TARGET)}]; "
            line += (f"p99 {callback.pct(99):.0f} ms far below Feishu's 3 s (< 1 s) "
                     f"[{mark(callback.pct(99) < P99_MS_TARGET)}]; "
                     f"errors {sum(callback.errors.values())} [{mark(not callback.errors)}]")
            say(line)


def ratios(healthz: Phase, callback: Phase) -> tuple[float, float, float]:
    """The callbacks' throughput over /healthz's, their CPU per request over a /healthz's, and their
    p99 over /healthz's."""
    share = callback.rps / healthz.rps if healthz.rps else float("nan")
    cost = callback.service_cpu_ms / healthz.service_cpu_ms if healthz.ok else float("nan")
    factor = callback.pct(99) / healthz.pct(99) if healthz.latencies else float("nan")
    return share, cost, factor


def figures(args: argparse.Namespace, results: list[TargetResult]) -> list[Figure]:
    """What one round printed, for the summary over the rounds (a skipped target has none)."""
    found: list[Figure] = []
    for r in results:
        for healthz, callback in r.phases:
            at = f"{r.target}, {callback.clients} clients"
            share, cost, factor = ratios(healthz, callback)
            found += [
                Figure(f"{at}: /healthz", healthz.rps, "req/s"),
                Figure(f"{at}: callbacks", callback.rps, "req/s"),
                Figure(f"{at}: callback share of /healthz", share, "", at_least(SHARE_TARGET)),
                Figure(f"{at}: CPU per /healthz", healthz.service_cpu_ms, "ms"),
                Figure(f"{at}: CPU per submit", callback.service_cpu_ms, "ms"),
                Figure(f"{at}: CPU per submit / /healthz's", cost, "x", at_most(CPU_TARGET)),
                Figure(f"{at}: callback p50", callback.pct(50), "ms"),
                Figure(f"{at}: callback p99", callback.pct(99), "ms", below(P99_MS_TARGET)),
                Figure(f"{at}: callback max", callback.latencies[-1] * 1000 if callback.latencies else float("nan"),
                       "ms"),
            ]
            if callback.clients == min(args.clients):
                found.append(Figure(f"{at}: callback p99 / /healthz's", factor, "x", at_most(P99_TARGET)))
            found += [Figure(f"{at}: callback errors", sum(callback.errors.values()), "", exactly(0)),
                      Figure(f"{at}: PATCHes per submit", callback.patches / callback.ok if callback.ok
                             else float("nan"), "")]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="callback phase per client count, default 20")
    parser.add_argument("--healthz-seconds", type=float, default=10.0,
                        help="/healthz phase per client count, default 10")
    parser.add_argument("--clients", default="5,50", help="comma-separated concurrent client counts, default 5,50")
    parser.add_argument("--targets", default="sqlite,postgres", help="sqlite and/or postgres, default both")
    parser.add_argument("--asks-per-level", type=int, default=5000,
                        help="pending asks seeded per client count (every submit answers a new one), default 5000")
    parser.add_argument("--asks", type=int, default=0, help="pending asks seeded in all (overrides --asks-per-level)")
    parser.add_argument("--asks-per-card", type=int, default=5,
                        help="pending asks per session / progress card, default 5; 0 puts them all on one card")
    parser.add_argument("--port", type=int, default=0, help="server port on 127.0.0.1; 0 picks a free one")
    parser.add_argument("--settings", default="project.settings",
                        help="DJANGO_SETTINGS_MODULE for every process (to try a settings variant), "
                             "default project.settings")
    parser.add_argument("--no-worker", action="store_true", help="run without the worker (no card PATCHes)")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="py-spy record the server during each callback phase into PREFIX-<target>-c<clients>.txt")
    parser.add_argument("--profile-gil", action="store_true", help="with --profile: sample only the GIL holder")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs (logs) and the database")
    add_rounds_argument(parser)
    args = parser.parse_args(argv)
    check_rounds(parser, args.repeat)
    try:
        args.clients = sorted({int(c) for c in args.clients.split(",") if c.strip()})
    except ValueError:
        parser.error("--clients takes comma-separated integers, like 5,50")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not args.clients or any(not 1 <= c <= 500 for c in args.clients):
        parser.error("--clients: counts from 1 to 500")
    if not targets or any(t not in TARGETS for t in targets):
        parser.error(f"--targets: a comma-separated subset of {','.join(TARGETS)}")
    if not 1 <= args.seconds <= 600 or not 1 <= args.healthz_seconds <= 600:
        parser.error("--seconds and --healthz-seconds: 1 to 600")
    if args.asks_per_level < 1 or args.asks < 0 or args.asks_per_card < 0:
        parser.error("--asks-per-level >= 1, --asks >= 0, --asks-per-card >= 0")
    raise_nofile_limit()

    def one_round(_: int) -> list[Figure]:
        started = time.monotonic()
        results = [run_target(args, target) for target in targets]
        print_report(args, results)
        say(f"\nwhole run {time.monotonic() - started:.0f} s")
        return figures(args, results)

    run_rounds("askcards Feishu callback benchmark", args.repeat, one_round,
               note=f"targets per target and client count: callbacks >= {SHARE_TARGET:.0%} of /healthz's throughput, "
                    f"CPU per submit <= {CPU_TARGET:g}x a /healthz's (server + worker + PostgreSQL)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
