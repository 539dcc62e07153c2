"""Scale-out benchmark: N parked waiters across two ``serve`` processes on PostgreSQL + Redis.

Run from the project directory (not collected by pytest: the file is not named test_*):

    .venv/bin/python -m tests.bench.bench_scaleout [--waiters 10000] [--rate 50]

The production shape it measures (issue 14, point 3): two daphne processes behind one address,
sharing one PostgreSQL database and one Redis (bus + cache); process A runs the
in-process worker (``manage.py serve``), B serves only (``manage.py serve --no-worker``): one
worker for the deployment, as the README recommends, without a third process on a 2-core machine.

Every step is bounded in time and count, every connection is to 127.0.0.1:

1. A throwaway PostgreSQL database (random name, dropped at the end, always), Redis DB 13 flushed
   at start and end, ``migrate``; ``ceil(N / --per-user)`` Django users, each with a login session
   (``tests.bench.harness.seed_fixture``, as bench_longpoll's), one agent granted them all;
   ``ANALYZE`` (again once the asks are made and once the MCP calls are parked: the statistics
   autovacuum keeps on a deployment, which this machine's PostgreSQL does not run).
2. Both servers start; their RSS when idle.
3. Panel sockets: each web user opens TWO ``/ws/panel/`` sockets (two tabs, placed by the load
   balancer): the "answerer" and the "watcher". Users cycle through the placements (A, B),
   (B, A), (A, A), (B, B), so answers go out on A and B alternately and half of the watcher wakes
   cross processes. Every socket holds its user's ``--per-user`` pending asks (default 10). RSS
   once all are connected and the servers are quiet: memory per panel socket.
4. The N asks, kinds in turn (ask i: REST, MCP, panel-only for i mod 3 = 0, 1, 2), user i // per-user:
   - REST and panel-only asks are created with ``POST /api/v1/tools/call`` (no wait), alternately
     on A and B; RSS once both panels of every user show them;
   - REST: ``GET /api/v1/asks/{id}/wait?timeout=60`` parked on A or B (alternating); a wait that
     comes back ``pending`` after its 60 s is sent again, as a client does. The first waits run
     1..60 s (by index), so that from then on the re-polls come evenly, about N / 180 a second, as
     clients that started at different times send them (with every first wait 60 s long, they
     would all come in one burst a minute; with 30..60 s, in a 30 s burst every other half
     minute, which one round's answers met and the next's did not). RSS once parked (memory per
     REST long-poll);
   - MCP: a blocking ``tools/call`` (the 2025-11-25 stateless wire of bench_mcp) on A or B,
     creating its ask and parking; RSS once parked (memory per MCP call);
   - panel-only asks have no agent waiting: their waiter is the user's watcher socket.
5. Answers over the answerer sockets on a fixed schedule, users in turn, so consecutive answers go
   out on A and B alternately: first ``--warmup`` answers (20) at 5/s, in no figure but losses
   (each process's first answers pay once for what it has not done yet: the first ones woke their
   watchers far later than the ones after); then the capacity probe, steps of
   ``--capacity-seconds`` (10) at rising rates from ``--capacity-start`` (10/s: doubling until a
   step misses wake p99 < 100 ms or loses one, then bisecting); then the steady phase,
   ``--steady-seconds`` (120) at ``--rate``, by default the target's 40/s when the probe held it
   (else the highest rate it held). The steady phase is the target's second half ("then 120 s at
   that rate"): a rate that holds for a 10 s step may not hold for two minutes, which is what a
   deployment needs, so the figure for the most a short step held is the capacity, and the steady
   phase checks the target's rate. Wakes: each REST wait / MCP call's result arrival minus its
   answer's send time; each watcher socket's ``ask_user_questions_cancelled`` for the ask minus the
   same send time (every ask has a watcher). "Crossing" when the waiter is on the other process
   than the socket that answered (the wake went through Redis).
6. Lost: a REST/MCP waiter that did not get its own ask, answered, with the label sent for it; a
   watcher that did not hear its ask close; an answer not acknowledged ``ok``.
7. Yardstick: each server's ``GET /admin/`` (302) and ``GET /healthz`` throughput, 20 keep-alive
   clients for a few seconds, after the waits (the same servers, the same run).

Figures are printed, not asserted; see docs/performance.md for the targets. ``--rounds N`` runs
all of it N times (a fresh database, Redis flush and servers each round) and ends with the
min / median / max of every figure over the rounds (tests/bench/common.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from askcards.runtime import collector
from tests.bench.common import (
    Figure, add_rounds_argument, analyze, at_least, at_most, below, check_rounds, exactly, percentile, run_rounds,
    say,
)
from tests.bench.harness import (
    HOST,
    REST_WAIT,
    Call,
    Fixture,
    Processes,
    answer_steadily,
    bench_env,
    check,
    free_port,
    mb,
    mcp_call,
    own_cpu_seconds,
    panel_socket,
    park,
    pg_admin,
    proc_cpu_seconds,
    proc_status,
    raise_nofile_limit,
    run_manage,
    search_capacity,
    seed_fixture,
    serve_command,
    settle_tasks,
    stop_server,
    until,
    wait_quiet,
    wait_until_serving,
    web_session,
    yardstick,
)

REDIS_URL = f"redis://{HOST}:6379/13"
REST_FIRST_WAITS = 60  # a REST client's first wait is 1..60 s (by index), then 60 s: re-polls come evenly
ASK_TIMEOUT = 3600
WAKE_P99_TARGET_MS = 100.0
KB_PER_WAITER_TARGET = 40.0  # per parked connection on average, at most
WARMUP_RATE = 5.0  # answers/s of the warm-up before the capacity probe
CAPACITY_TARGET = 40.0  # answers/s held (wake p99 < 100 ms, 0 lost) with all waiters parked, at least
STEADY_SECONDS_TARGET = 120.0  # the steady phase at that rate, at least
TARGET_WAITERS = 10_000  # the size the targets are for
KINDS = ("rest", "mcp", "panel")
PLACEMENTS = ((0, 1), (1, 0), (0, 0), (1, 1))  # (answerer socket, watcher socket) server per user
NAMES = ("A", "B")

# ------------------------------------------------------------------------------------------ state


@dataclass
class Waiter:
    index: int
    kind: str
    user: int
    server: int  # where its REST wait / MCP call is parked; for panel-only: its watcher's server
    answer_server: int
    call: Call
    watcher_woke: float | None = None
    watcher_reason: str | None = None
    repolls: int = 0
    steady: bool = False  # answered in the steady phase (the wake tables); else in a capacity step

    @property
    def woken(self) -> bool:
        """Its watcher heard the ask close and, for a REST/MCP waiter, its result came back answered."""
        if self.watcher_woke is None:
            return False
        return self.kind == "panel" or (self.call.done and check("mcp" if self.kind == "mcp" else "rest", self.call) is None)

    def wakes_ms(self) -> list[float]:
        sent = self.call.answer_sent
        if sent is None:
            return []
        wakes = [] if self.watcher_woke is None else [(self.watcher_woke - sent) * 1000]
        if self.kind != "panel" and self.call.arrived is not None and self.woken:
            wakes.append((self.call.arrived - sent) * 1000)
        return wakes

    @property
    def crossing(self) -> bool:
        return self.server != self.answer_server


@dataclass
class Socket:
    user: int
    server: int
    role: str  # "answerer" | "watcher"
    by_question: dict[str, Waiter]
    ws: aiohttp.ClientWebSocketResponse | None = None
    shown: set[str] = field(default_factory=set)
    closed: str | None = None
    other: list[Any] = field(default_factory=list)

    async def read(self, by_ask: dict[str, Waiter]) -> None:
        assert self.ws is not None
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                kind = data.get("type")
                if kind == "ask_user_questions":
                    ask_id = data["requestId"]
                    self.shown.add(ask_id)
                    waiter = self.by_question.get(((data.get("questions") or [{}])[0]).get("question"))
                    if waiter is not None and waiter.call.ask_id is None:
                        waiter.call.ask_id = ask_id
                        waiter.call.shown_at = time.monotonic()
                        by_ask[ask_id] = waiter
                        waiter.call.shown.set()
                elif kind == "ask_user_questions_cancelled":
                    waiter = by_ask.get(data.get("requestId"))
                    if waiter is not None and self.role == "watcher" and waiter.watcher_woke is None:
                        waiter.watcher_woke = time.monotonic()
                        waiter.watcher_reason = data.get("reason")
                elif kind == "ask_user_questions_ack":
                    waiter = by_ask.get(data.get("requestId"))
                    if waiter is not None and self.role == "answerer":
                        waiter.call.ack = data
                # "delivered": the agent took the result of an ask this socket's user answered.
                elif kind not in ("history", "history_add", "ask_user_questions_delivered") and len(self.other) < 5:
                    self.other.append(data)
        finally:
            self.closed = f"closed (code {self.ws.close_code})"


async def until_stalled(remaining, bound: float, stall: float = 20.0) -> None:
    """Wait until ``remaining()`` is 0, or has not gone down for ``stall`` s, or ``bound`` s passed."""
    deadline = time.monotonic() + bound
    last, since = remaining(), time.monotonic()
    while last and time.monotonic() < deadline and time.monotonic() - since < stall:
        await asyncio.sleep(0.2)
        now = remaining()
        if now < last:
            last, since = now, time.monotonic()


def unshown(waiters: list[Waiter], user_sockets: dict[int, list[Socket]]) -> int:
    """(ask, socket of its user) pairs where the socket never got the ask's ``ask_user_questions``."""
    return sum(1 for w in waiters for s in user_sockets[w.user] if not w.call.ask_id or w.call.ask_id not in s.shown)


def snapshot_rss(pids: list[int]) -> list[int]:
    return [proc_status(pid).get("VmRSS", 0) for pid in pids]


async def quiet_all(pids: list[int], timeout: float) -> None:
    await asyncio.sleep(2.0)
    await asyncio.gather(*(wait_quiet(pid, timeout) for pid in pids))


# ------------------------------------------------------------------------------------------ phases


async def connect_sockets(sockets: list[Socket], ports: list[int], fixture: Fixture, by_ask: dict[str, Waiter],
                          http: aiohttp.ClientSession) -> list[asyncio.Task]:
    semaphore = asyncio.Semaphore(20)
    readers: list[asyncio.Task] = []

    async def one(sock: Socket) -> None:
        async with semaphore:
            sock.ws = await panel_socket(http, ports[sock.server], fixture.cookie(sock.user))
        readers.append(asyncio.ensure_future(sock.read(by_ask)))

    await asyncio.wait_for(asyncio.gather(*(one(s) for s in sockets)), 60 + len(sockets) / 5)
    return readers


async def create_asks(http: aiohttp.ClientSession, bases: list[str], key: str, names: list[str],
                      waiters: list[Waiter], concurrency: int, by_ask: dict[str, Waiter]) -> None:
    """REST and panel-only asks: ``POST /api/v1/tools/call`` without wait, alternately on A and B;
    the response names the ask (so an ask its panels never showed can still be answered)."""
    semaphore = asyncio.Semaphore(concurrency)
    auth = {"Authorization": f"Bearer {key}"}
    failures: list[str] = []

    async def session(user: int) -> None:
        async with semaphore:
            await web_session(http, bases[user % 2], auth, f"bench/u{user}", names[user])

    async def one(n: int, waiter: Waiter) -> None:
        payload = {"session": f"bench/u{waiter.user}", "name": "ask_user_questions",
                   "arguments": {"questions": [{"question": waiter.call.question, "header": "bench",
                                                "options": [{"label": "Alpha", "description": "first"},
                                                            {"label": "Beta"}]}]},
                   "timeout_seconds": ASK_TIMEOUT}
        async with semaphore:
            async with http.post(f"{bases[n % 2]}/api/v1/tools/call", json=payload, headers=auth) as resp:
                body = await resp.text()
        try:
            ask_id = json.loads(body)["ask"]["id"]
        except (ValueError, KeyError, TypeError):
            ask_id = None
        if resp.status != 200 or not ask_id:
            if len(failures) < 5:
                failures.append(f"HTTP {resp.status}: {body[:300]}")
            return
        waiter.call.ask_id = waiter.call.ask_id or ask_id
        by_ask[ask_id] = waiter

    users = sorted({w.user for w in waiters})
    await asyncio.wait_for(asyncio.gather(*(session(u) for u in users)), 60 + len(users) / 5)
    await asyncio.wait_for(asyncio.gather(*(one(n, w) for n, w in enumerate(waiters))), 120 + len(waiters) / 5)
    if failures:
        raise RuntimeError(f"ask creation failed: {failures}")


async def rest_wait(http: aiohttp.ClientSession, base: str, key: str, waiter: Waiter, polling: dict[str, float]) -> None:
    """Long-poll the ask until it is no longer pending (a client sends the wait again when it comes
    back pending after its 60 s, whether or not the answer was sent meanwhile), until
    ``polling["until"]`` (monotonic; the bench sets it once every answer has been sent)."""
    call = waiter.call
    headers = {"Authorization": f"Bearer {key}"}
    wait = 1 + (waiter.index // len(KINDS)) % REST_FIRST_WAITS  # the first wait only (see the module docstring)
    try:
        while True:
            call.headers_sent = time.monotonic()
            async with http.get(f"{base}/api/v1/asks/{call.ask_id}/wait?timeout={wait}", headers=headers) as resp:
                body = await resp.read()
                call.arrived, call.status = time.monotonic(), resp.status
            try:
                data = json.loads(body)
            except ValueError:
                call.error = f"HTTP {resp.status}, not JSON: {body[:200]!r}"
                return
            # Still pending (its answer not sent, or not yet processed by a busy server): wait again.
            if resp.status == 200 and data.get("status") == "pending" and time.monotonic() < polling["until"]:
                waiter.repolls += 1
                wait = REST_WAIT
                continue
            call.result = {"status": data.get("status"), "ask": data}  # the shape harness.check reads
            return
    except Exception as exc:  # noqa: BLE001 - every failure is a lost wait
        call.arrived = time.monotonic()
        call.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        call.done = True


def answers_over(waiters: list[Waiter], answerers: dict[int, Socket]) -> list[tuple[Any, str | None, Call]]:
    """The waiters' answers as ``answer_steadily`` sends them, each over its user's answerer socket."""
    return [(answerers[w.user].ws, w.call.ask_id, w.call) for w in waiters]


async def answer_step(segment: list[Waiter], answerers: dict[int, Socket], rate: float) -> dict[str, Any]:
    """One step of the capacity probe: ``segment`` answered at ``rate``/s, then every waiter of it
    (its watcher, its REST/MCP call) given time to wake; wake p50/p99 over all of them."""
    _, slip_ms = await answer_steadily(answers_over(segment, answerers), rate)
    await until(lambda: all(w.woken for w in segment), 30 + len(segment) / rate, 0.1)
    wakes = sorted(ms for w in segment for ms in w.wakes_ms())
    return {"rate": rate, "asks": len(segment), "p50": percentile(wakes, 50), "p99": percentile(wakes, 99),
            "lost": sum(1 for w in segment if not w.woken), "slip_ms": slip_ms}


async def bench(args: argparse.Namespace, ports: list[int], procs: Processes, servers: list[subprocess.Popen],
                fixture: Fixture, database_url: str) -> dict[str, Any]:
    pids = [s.pid for s in servers]
    bases = [f"http://{HOST}:{p}" for p in ports]
    key, names = fixture.key, fixture.users
    report: dict[str, Any] = {"load_start": os.getloadavg()[0], "rss": {}}
    deadline = time.monotonic() + 90  # for both servers
    for base in bases:
        await wait_until_serving(base, procs.alive, timeout=max(0.0, deadline - time.monotonic()))
    report["rss"]["idle"] = snapshot_rss(pids)

    users = len(names)
    waiters: list[Waiter] = []
    for i in range(args.waiters):
        user = i // args.per_user
        kind = KINDS[i % 3]
        answer_server, watcher_server = PLACEMENTS[user % 4]
        server = watcher_server if kind == "panel" else (i // 3 + user) % 2
        call = Call(index=i, question=f"scaleout {kind} question {i}: which one?", label="Alpha" if i % 2 else "Beta")
        waiters.append(Waiter(i, kind, user, server, answer_server, call))
    by_question = {w.call.question: w for w in waiters}
    by_ask: dict[str, Waiter] = {}
    sockets = [Socket(u, PLACEMENTS[u % 4][role], ("answerer", "watcher")[role], by_question)
               for u in range(users) for role in (0, 1)]
    answerers = {s.user: s for s in sockets if s.role == "answerer"}
    by_kind = {k: [w for w in waiters if w.kind == k] for k in KINDS}
    report["counts"] = {k: len(v) for k, v in by_kind.items()}
    report["sockets"] = [sum(1 for s in sockets if s.server == n) for n in (0, 1)]
    report["parked_per_server"] = {k: [sum(1 for w in v if w.server == n) for n in (0, 1)] for k, v in by_kind.items()}

    timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_read=REST_WAIT + 60)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    readers: list[asyncio.Task] = []
    tasks: list[asyncio.Future] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        try:
            # --- panel sockets
            t0 = time.monotonic()
            readers = await connect_sockets(sockets, ports, fixture, by_ask, http)
            await asyncio.sleep(0.5)
            refused = [s.closed for s in sockets if s.closed]
            if refused:
                raise RuntimeError(f"{len(refused)} panel sockets were refused, e.g. {refused[0]}")
            await quiet_all(pids, 30)
            report["sockets_seconds"] = time.monotonic() - t0
            report["rss"]["sockets"] = snapshot_rss(pids)
            say(f"  {len(sockets)} panel sockets connected in {report['sockets_seconds']:.1f} s; RSS "
                + " / ".join(f"{mb(r):.0f}" for r in report["rss"]["sockets"]) + " MB")

            # --- REST and panel-only asks, shown on both sockets of their user
            t0 = time.monotonic()
            created = by_kind["rest"] + by_kind["panel"]
            await create_asks(http, bases, key, names, created, args.create_concurrency, by_ask)
            user_sockets: dict[int, list[Socket]] = {}
            for s in sockets:
                user_sockets.setdefault(s.user, []).append(s)
            await until_stalled(lambda: unshown(created, user_sockets), 60 + len(created) / 20)
            report["unshown"] = unshown(created, user_sockets)
            await quiet_all(pids, 30)
            report["create_seconds"] = time.monotonic() - t0
            analyze(database_url)
            report["rss"]["asks"] = snapshot_rss(pids)
            say(f"  {len(created)} REST + panel-only asks created and shown in {report['create_seconds']:.1f} s")

            # --- REST long-polls
            t0 = time.monotonic()
            # REST clients keep waiting until every answer has gone out, then --bound s more: a phase
            # that runs long (MCP parking can take many minutes at the full size) ends no wait early.
            polling = {"until": math.inf}
            tasks += [asyncio.ensure_future(rest_wait(http, bases[w.server], key, w, polling)) for w in by_kind["rest"]]
            await until(lambda: all(w.call.headers_sent for w in by_kind["rest"]), 60 + len(by_kind["rest"]) / 50)
            await quiet_all(pids, 30)
            report["rest_park_seconds"] = time.monotonic() - t0
            report["rss"]["rest"] = snapshot_rss(pids)
            report["rest_early"] = sum(1 for w in by_kind["rest"] if w.call.done)
            say(f"  {len(by_kind['rest'])} REST long-polls parked in {report['rest_park_seconds']:.1f} s")

            # --- MCP calls (each creates its ask and parks)
            t0 = time.monotonic()
            window = asyncio.Semaphore(args.create_concurrency)

            def request(w: Waiter) -> Callable[[], Awaitable[None]]:
                query = urlencode({"session": f"bench/u{w.user}/mcp", "platform": "web", "web_user": names[w.user]})
                return lambda: mcp_call(http, bases[w.server], key, query, w.call, ASK_TIMEOUT, modern=False)

            async def launch() -> None:
                for w in by_kind["mcp"]:
                    await window.acquire()
                    tasks.append(asyncio.ensure_future(park(w.call, request(w), window, 20)))

            launcher = asyncio.ensure_future(launch())
            # Bounded by progress, not by a rate: on a machine the parked waiters already keep busy
            # the calls park slowly, and a slow phase is a figure; only a minute without one more
            # call shown (or failed) stops the run.
            await until_stalled(lambda: sum(1 for w in by_kind["mcp"] if not (w.call.shown.is_set() or w.call.done)),
                                60 + len(by_kind["mcp"]), stall=60)
            if not launcher.done():
                launcher.cancel()
                raise RuntimeError("the MCP calls stopped parking: none was shown (or failed) for 60 s")
            await quiet_all(pids, 30)
            report["mcp_park_seconds"] = time.monotonic() - t0
            analyze(database_url)
            report["rss"]["mcp"] = snapshot_rss(pids)
            report["mcp_early"] = sum(1 for w in by_kind["mcp"] if w.call.done)
            report["unshown"] += unshown(by_kind["mcp"], user_sockets)
            report["threads_parked"] = [proc_status(p).get("Threads", 0) for p in pids]
            say(f"  {len(by_kind['mcp'])} MCP calls parked in {report['mcp_park_seconds']:.1f} s; RSS "
                + " / ".join(f"{mb(r):.0f}" for r in report["rss"]["mcp"]) + " MB")

            # --- what the parked waiters cost with nothing happening (heartbeats, REST re-polls)
            cpu, client = [proc_cpu_seconds(p) for p in pids], own_cpu_seconds()
            t0 = time.monotonic()
            await asyncio.sleep(args.idle_seconds)
            report["idle_cpu"] = [(proc_cpu_seconds(p) - c) / (time.monotonic() - t0) for p, c in zip(pids, cpu)]
            report["client_idle_cpu"] = (own_cpu_seconds() - client) / (time.monotonic() - t0)

            # --- answers: users in turn, so the answering process alternates
            order = sorted((w for w in waiters if w.call.ask_id), key=lambda w: (w.index % args.per_user, w.user))
            report["unanswerable"] = len(waiters) - len(order)
            # Warm-up: the first answers a process serves pay once for what it has not done yet
            # (modules the answer path imports, statements its connections prepare, its first bus
            # messages): a deployment that has run a while has paid that. Counted for losses only.
            warm, order = order[:args.warmup], order[args.warmup:]
            if warm:
                await answer_steadily(answers_over(warm, answerers), WARMUP_RATE)
                await until(lambda: all(w.woken for w in warm), 30 + len(warm) / WARMUP_RATE, 0.1)
                say(f"  warm-up: {len(warm)} answers at {WARMUP_RATE:g}/s (losses only)")
            # A capacity probe first, on the first answers (the waiters parked all the while):
            # rising rates until wake p99 misses 100 ms; the rest answered at the rate that held.
            report["capacity"] = []
            if args.capacity_steps:
                say("  capacity probe (the parked waiters' first answers, in steps of rising rate):")
                queue = list(order)
                # What the steady phase keeps at least: its length at the target's rate.
                steady_min = min(len(order) // 2, round((args.rate or CAPACITY_TARGET) * args.steady_seconds))

                async def measure(rate: float) -> dict[str, Any] | None:
                    count = max(50, round(rate * args.capacity_seconds))
                    if len(queue) - count < steady_min:
                        return None
                    segment = queue[:count]
                    del queue[:count]
                    return await answer_step(segment, answerers, rate)

                report["capacity"] = await search_capacity(measure, args.capacity_start, args.capacity_steps)
                order = queue
            held = [step["rate"] for step in report["capacity"] if step["held"]]
            report["rate"] = rate = args.rate or steady_rate(held, args.capacity_start)
            cut = max(100, round(rate * args.steady_seconds))
            steady, later = order[:cut], order[cut:]
            for w in steady:
                w.steady = True
            report["steady_answers"] = len(steady)
            say(f"  steady phase: {len(steady)} answers at {rate:.1f}/s")
            answers = answers_over(steady, answerers)
            cpu, client = [proc_cpu_seconds(p) for p in pids], own_cpu_seconds()
            t0 = time.monotonic()
            report["answer_seconds"], report["slip_ms"] = await answer_steadily(answers, rate)
            await until_stalled(lambda: sum(1 for w in steady if not w.woken), 600 + len(steady), stall=60)
            report["cpu_answer"] = [proc_cpu_seconds(p) - c for p, c in zip(pids, cpu)]
            report["cpu_answer_seconds"] = time.monotonic() - t0
            report["client_cpu_answer"] = (own_cpu_seconds() - client) / report["cpu_answer_seconds"]
            # The rest: answered faster, checked for losses only (not in the wake tables).
            report["drained"], report["drain_seconds"] = len(later), 0.0
            if later:
                say(f"  the other {len(later)} answers at {args.drain_rate:g}/s (losses only)")
                report["drain_seconds"], _ = await answer_steadily(answers_over(later, answerers), args.drain_rate)
            polling["until"] = time.monotonic() + args.bound
            if later:
                # A late wake is not a lost one: wait while wakes still come (a minute without one ends it).
                await until_stalled(lambda: sum(1 for w in later if not w.woken), 600 + len(later), stall=60)
            await settle_tasks(tasks, REST_WAIT + 60)
            await until(lambda: all(w.watcher_woke and w.call.ack for w in order), 30, 0.2)
            report["hwm"] = [proc_status(p).get("VmHWM", 0) for p in pids]
            report["other"] = [m for s in sockets for m in s.other][:3]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for s in sockets:
                if s.ws is not None and not s.ws.closed:
                    await s.ws.close()
            for r in readers:
                r.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    # --- check every waiter
    lost: dict[str, int] = {}
    examples: list[str] = []
    wakes: dict[tuple[str, bool], list[float]] = {}

    def bad(kind: str, detail: str) -> None:
        lost[kind] = lost.get(kind, 0) + 1
        if len(examples) < 6:
            examples.append(f"{kind}: {detail}")

    answer_shown = {s.user: s.shown for s in sockets if s.role == "answerer"}
    watch_shown = {s.user: s.shown for s in sockets if s.role == "watcher"}
    for w in waiters:
        call = w.call
        if call.ask_id is None:
            bad(f"{w.kind}: never shown", str(w.index))
            continue
        if w.kind in ("rest", "mcp"):
            problem = check("mcp" if w.kind == "mcp" else "rest", call)
            if problem is None:
                if w.steady:
                    wakes.setdefault((w.kind, w.crossing), []).append((call.arrived - call.answer_sent) * 1000)
            else:
                bad(f"{w.kind}: {problem[0]}", problem[1])
        watcher_crossing = PLACEMENTS[w.user % 4][1] != w.answer_server
        if w.watcher_woke is None or call.answer_sent is None:
            bad("panel: watcher never heard the ask close", call.ask_id)
        elif w.watcher_reason != "submitted":  # the reason of an answered ask
            bad(f"panel: closed with reason {w.watcher_reason}", call.ask_id)
        elif w.steady:
            wakes.setdefault(("panel", watcher_crossing), []).append((w.watcher_woke - call.answer_sent) * 1000)
        for role, shown in (("answerer", w.user in answer_shown and call.ask_id in answer_shown[w.user]),
                            ("watcher", w.user in watch_shown and call.ask_id in watch_shown[w.user])):
            if not shown:
                bad(f"panel: the {role} socket never showed the ask", call.ask_id)
        if not (call.ack or {}).get("ok"):
            bad("answer not acknowledged ok", f"{call.ask_id} {call.ack}")
    for values in wakes.values():
        values.sort()
    report["wakes"] = wakes
    report["lost"] = lost
    report["examples"] = examples
    report["repolls"] = sum(w.repolls for w in waiters)
    report["crossing"] = {k: sum(1 for w in by_kind[k] if w.crossing) for k in KINDS}

    # --- yardstick: the same servers, idle again
    auth = {"Authorization": f"Bearer {key}"}
    report["yardstick"] = []
    for base in bases:
        report["yardstick"].append({
            "admin": await yardstick(base, "/admin/", {}, 20, args.yardstick_seconds, 302),
            "healthz": await yardstick(base, "/healthz", auth, 20, args.yardstick_seconds, 200),
        })
    return report


def print_report(args: argparse.Namespace, report: dict[str, Any], nofile: tuple[int, int]) -> None:
    n = args.waiters
    counts = report["counts"]
    rss = report["rss"]
    say()
    say("=== askcards scale-out benchmark: two serve processes (A: serve + worker, B: serve --no-worker), "
        "PostgreSQL + Redis ===")
    say(f"waiters {n}: REST long-polls {counts['rest']}, MCP calls {counts['mcp']}, panel-only asks {counts['panel']}; "
        f"panel sockets {sum(report['sockets'])} (A {report['sockets'][0]}, B {report['sockets'][1]}; 2 per web user, "
        f"{args.per_user} asks each); steady answer rate {report['rate']:.0f}/s; open-file limit {nofile[0]}; cores {os.cpu_count()}; "
        f"load average at start {report['load_start']:.1f} / end {os.getloadavg()[0]:.1f} (other processes skew every figure)")
    for kind in ("rest", "mcp"):
        a, b = report["parked_per_server"][kind]
        say(f"  {kind}: parked A {a} / B {b}; {report['crossing'][kind]} of them woken from the other process")
    say(f"phases: sockets {report['sockets_seconds']:.1f} s, REST+panel asks {report['create_seconds']:.1f} s, "
        f"REST parking {report['rest_park_seconds']:.1f} s, MCP parking {report['mcp_park_seconds']:.1f} s, steady answers "
        f"{report['answer_seconds']:.1f} s (max schedule slip {report['slip_ms']:.0f} ms), the other {report['drained']} "
        f"answers {report['drain_seconds']:.1f} s; REST re-polls (their waits ended pending and were sent again): "
        f"{report['repolls']}; returned before any answer: REST {report['rest_early']}, MCP {report['mcp_early']}")
    say(f"panel shows missing once parked ((ask, socket of its user) pairs without the ask's message): "
        f"{report['unshown']} (counted below as lost: that user's tab does not show the ask)")
    cpu, idle, answers = report["cpu_answer"], report["idle_cpu"], max(1, report["steady_answers"])
    per_answer = [c * 1000 / answers for c in cpu]
    net = [(c - i * report["cpu_answer_seconds"]) * 1000 / answers for c, i in zip(cpu, idle)]
    say(f"server CPU with everything parked and nothing answered (heartbeats, REST re-polls): A {idle[0]:.0%}, "
        f"B {idle[1]:.0%} of a core; this load generator's own: {report['client_idle_cpu']:.0%} of a core, "
        f"{report['client_cpu_answer']:.0%} during the steady answers (the same cores serve both)")
    say(f"server CPU during the steady answers and their wakes ({report['cpu_answer_seconds']:.0f} s): A {cpu[0]:.1f} s, "
        f"B {cpu[1]:.1f} s; per answer {sum(per_answer):.1f} ms (A {per_answer[0]:.1f}, B {per_answer[1]:.1f}), "
        f"{sum(net):.1f} ms without the parked waiters' own cost")
    say()
    say("memory (VmRSS, MB)      " + "".join(f"{name:>10}" for name in NAMES))
    steps = [("idle", "idle after start"), ("sockets", "+ panel sockets"), ("asks", "+ REST/panel asks"),
             ("rest", "+ REST long-polls"), ("mcp", "+ MCP calls")]
    for key, label in steps:
        say(f"  {label:<22}" + "".join(f"{mb(v):>10.0f}" for v in rss[key]))
    say("  peak (VmHWM)          " + "".join(f"{mb(v):>10.0f}" for v in report["hwm"]))
    say(f"  threads with all parked: A {report['threads_parked'][0]}, B {report['threads_parked'][1]}")

    memory = memory_per_waiter(report)

    def per(kind: str) -> str:
        both, a, b = memory[kind]
        return f"{both:.1f} kB ({NAMES[0]} {a:.1f}, {NAMES[1]} {b:.1f})"

    say(f"memory per waiter (RSS delta / count): panel socket {per('socket')}; REST long-poll {per('rest')}; "
        f"MCP call {per('mcp')}")
    total_parked, waiters_total, overall = memory["all"]
    say(f"all parked (sockets + asks + long-polls + calls) minus idle: {mb(total_parked):.0f} MB over "
        f"{waiters_total} connections = {overall:.1f} kB each")
    say()
    for step in report["capacity"]:
        say(f"capacity step {step['rate']:.0f} answers/s ({step['asks']} answers): wake p50 {step['p50']:.1f} ms, "
            f"p99 {step['p99']:.1f} ms, lost {step['lost']}, send slip {step['slip_ms']:.0f} ms "
            f"-> {'held' if step['held'] else 'missed'}")
    say(f"wake latency of the steady phase ({report['steady_answers']} answers at {report['rate']:.0f}/s), "
        "answer sent -> waiter woke (ms):")
    for kind in KINDS:
        for crossing in (False, True):
            values = report["wakes"].get((kind, crossing), [])
            say(f"  {kind:<5} {'crossing A<->B' if crossing else 'same process  '}  n={len(values):<6} "
                f"p50 {percentile(values, 50):7.1f}   p99 {percentile(values, 99):7.1f}   "
                f"max {values[-1] if values else float('nan'):7.1f}")
    all_wakes = all_wakes_of(report)
    lost_total = sum(report["lost"].values())
    say(f"  all    n={len(all_wakes)}  p50 {percentile(all_wakes, 50):.1f}   p99 {percentile(all_wakes, 99):.1f}")
    say(f"lost or wrong: {lost_total}" + (f"  {report['lost']}" if report["lost"] else "")
        + (f"; {report['unanswerable']} asks never shown, never answered" if report["unanswerable"] else ""))
    for example in report["examples"]:
        say(f"    e.g. {example}")
    if report["other"]:
        say(f"panel: unexpected messages e.g. {report['other']}")
    say()
    for s, y in enumerate(report["yardstick"]):
        for name, label in (("admin", "GET /admin/ (302)"), ("healthz", "GET /healthz")):
            figures = y[name]
            extra = f"  unexpected {figures['unexpected']}" if figures["unexpected"] else ""
            say(f"YARDSTICK {NAMES[s]} {label}: {figures['rps']:.0f} req/s, p50 {figures['p50']:.1f} ms, "
                f"p99 {figures['p99']:.1f} ms (20 keep-alive clients, {args.yardstick_seconds:g} s){extra}")
    trivial = sum(y["admin"]["rps"] for y in report["yardstick"])
    rate = report["rate"]
    say(f"RATIO steady answer rate / trivial view (both servers' GET /admin/ summed): {rate:.0f} / {trivial:.0f} = "
        f"{rate / trivial if trivial else float('nan'):.3f}")
    held = [step["rate"] for step in report["capacity"] if step["held"]]
    best = capacity(report)
    if report["capacity"]:
        say(f"RATIO capacity (highest probed rate with wake p99 < {WAKE_P99_TARGET_MS:.0f} ms and nothing lost) / "
            f"trivial view: " + (f"{best:.0f} / {trivial:.0f} = {best / trivial if trivial else float('nan'):.3f}"
                                 if held else f"none held (the first step, {args.capacity_start:g}/s, missed)"))
    p99 = percentile(all_wakes, 99)
    steady_seconds = report["steady_answers"] / rate if rate else float("nan")
    say()
    say(f"targets (printed, not asserted; set for {TARGET_WAITERS:,} waiters, this run had {n:,}): "
        f"capacity >= {CAPACITY_TARGET:.0f} answers/s with wake p99 < {WAKE_P99_TARGET_MS:.0f} ms and 0 lost: "
        f"{best:.0f} [{'ok' if best >= CAPACITY_TARGET else 'MISSED'}]; "
        f"then a steady phase of >= {STEADY_SECONDS_TARGET:.0f} s at that rate: {report['steady_answers']} answers at "
        f"{rate:.0f}/s = {steady_seconds:.0f} s "
        f"[{'ok' if steady_seconds >= STEADY_SECONDS_TARGET and rate >= CAPACITY_TARGET else 'MISSED'}] "
        f"with wake p99 < {WAKE_P99_TARGET_MS:.0f} ms: {p99 / WAKE_P99_TARGET_MS:.2f}x "
        f"[{'ok' if p99 < WAKE_P99_TARGET_MS else 'MISSED'}]; "
        f"memory per parked connection <= {KB_PER_WAITER_TARGET:.0f} kB: {overall / KB_PER_WAITER_TARGET:.2f}x "
        f"[{'ok' if overall <= KB_PER_WAITER_TARGET else 'MISSED'}]; "
        f"0 lost [{'ok' if lost_total == 0 else 'MISSED'}]")


def memory_per_waiter(report: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    """kB per waiter of each kind (both servers, A, B: RSS delta of its step over its count), and
    "all": (kB of everything parked minus idle, connections, kB per connection)."""
    rss = report["rss"]

    def per(delta_key: str, base_key: str, count: list[int]) -> tuple[float, float, float]:
        each = [(rss[delta_key][s] - rss[base_key][s]) / max(1, count[s]) for s in (0, 1)]
        total = sum(rss[delta_key]) - sum(rss[base_key])
        return total / max(1, sum(count)), each[0], each[1]

    total_parked = sum(rss["mcp"]) - sum(rss["idle"])
    connections = report["counts"]["rest"] + report["counts"]["mcp"] + sum(report["sockets"])
    return {"socket": per("sockets", "idle", report["sockets"]),
            "rest": per("rest", "asks", report["parked_per_server"]["rest"]),
            "mcp": per("mcp", "rest", report["parked_per_server"]["mcp"]),
            "all": (total_parked, connections, total_parked / max(1, connections))}


def all_wakes_of(report: dict[str, Any]) -> list[float]:
    return sorted(ms for values in report["wakes"].values() for ms in values)


def steady_rate(held: list[float], start: float) -> float:
    """The steady phase's rate when ``--rate`` is not given: the target's once the probe held it
    (the target is that rate for two minutes), else the highest rate held, else half the first."""
    if not held:
        return start / 2
    return CAPACITY_TARGET if max(held) >= CAPACITY_TARGET else max(held)


def capacity(report: dict[str, Any]) -> float:
    """The highest probed rate that held (0 when none did or there was no probe)."""
    return max((step["rate"] for step in report["capacity"] if step["held"]), default=0.0)


def figures(report: dict[str, Any]) -> list[Figure]:
    """What one round printed, for the summary over the rounds."""
    memory = memory_per_waiter(report)
    trivial = sum(y["admin"]["rps"] for y in report["yardstick"])
    rate = report["rate"]
    answers = max(1, report["steady_answers"])
    cpu, idle = report["cpu_answer"], report["idle_cpu"]
    net = sum((c - i * report["cpu_answer_seconds"]) * 1000 / answers for c, i in zip(cpu, idle))
    wakes = all_wakes_of(report)
    found = [
        Figure("phase: panel sockets connected", report["sockets_seconds"], "s"),
        Figure("phase: REST + panel-only asks created and shown", report["create_seconds"], "s"),
        Figure("phase: REST long-polls parked", report["rest_park_seconds"], "s"),
        Figure("phase: MCP calls parked", report["mcp_park_seconds"], "s"),
    ]
    for kind, label in (("socket", "panel socket"), ("rest", "REST long-poll"), ("mcp", "MCP call")):
        both, a, b = memory[kind]
        found += [Figure(f"memory per {label}", both, "kB"), Figure(f"memory per {label}, A", a, "kB"),
                  Figure(f"memory per {label}, B", b, "kB")]
    found += [
        Figure("memory, all parked minus idle", mb(memory["all"][0]), "MB"),
        Figure("memory per parked connection", memory["all"][2], "kB", at_most(KB_PER_WAITER_TARGET)),
        Figure("peak memory (VmHWM), A", mb(report["hwm"][0]), "MB"),
        Figure("peak memory (VmHWM), B", mb(report["hwm"][1]), "MB"),
        Figure("server CPU, parked and idle, A", idle[0] * 100, "% core"),
        Figure("server CPU, parked and idle, B", idle[1] * 100, "% core"),
        Figure("server CPU per steady answer", sum(cpu) * 1000 / answers, "ms"),
        Figure("server CPU per steady answer, without the parked", net, "ms"),
        Figure("load generator CPU, parked and idle", report["client_idle_cpu"] * 100, "% core"),
        Figure("load generator CPU, steady answers", report["client_cpu_answer"] * 100, "% core"),
        Figure("CAPACITY (p99 < 100 ms, 0 lost, all parked)", capacity(report), "answers/s", at_least(CAPACITY_TARGET)),
        Figure("RATIO capacity / trivial view", capacity(report) / trivial if trivial else float("nan")),
        Figure("steady phase rate", rate, "answers/s", at_least(CAPACITY_TARGET)),
        Figure("steady phase length (answers / rate)", report["steady_answers"] / rate if rate else float("nan"), "s",
               at_least(STEADY_SECONDS_TARGET)),
        Figure("RATIO steady rate / trivial view", rate / trivial if trivial else float("nan")),
        Figure("steady wake p50, all", percentile(wakes, 50), "ms"),
        Figure("steady wake p99, all", percentile(wakes, 99), "ms", below(WAKE_P99_TARGET_MS)),
        Figure("steady wake max, all", wakes[-1] if wakes else float("nan"), "ms"),
    ]
    for kind in KINDS:
        for crossing in (False, True):
            values = report["wakes"].get((kind, crossing), [])
            where = "crossing" if crossing else "same process"
            found += [Figure(f"steady wake p50, {kind} {where}", percentile(values, 50), "ms"),
                      Figure(f"steady wake p99, {kind} {where}", percentile(values, 99), "ms"),
                      Figure(f"steady wake max, {kind} {where}", values[-1] if values else float("nan"), "ms")]
    found += [
        Figure("lost or wrong", sum(report["lost"].values()), "", exactly(0)),
        Figure("panel shows missing", report["unshown"]),
        Figure("REST re-polls", report["repolls"]),
    ]
    for s, y in enumerate(report["yardstick"]):
        found += [Figure(f"YARDSTICK {NAMES[s]} GET /admin/", y["admin"]["rps"], "req/s"),
                  Figure(f"YARDSTICK {NAMES[s]} GET /healthz", y["healthz"]["rps"], "req/s")]
    return found


def create_database() -> str:
    name = f"askcards_bench_{secrets.token_hex(6)}"
    pg_admin(f"CREATE DATABASE {name}")
    return name


def drop_database(name: str) -> None:
    pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # its servers' connections ended too


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=10000, help="asks with a parked waiter, default 10000")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="steady answers per second; default: the target's 40 when the capacity probe held "
                             "it, else the highest rate it held")
    parser.add_argument("--capacity-steps", type=int, default=6,
                        help="steps of the capacity probe (wake p99 < 100 ms, nothing lost); 0 skips it, default 6")
    parser.add_argument("--capacity-start", type=float, default=10.0, help="its first rate, answers/s, default 10")
    parser.add_argument("--capacity-seconds", type=float, default=10.0,
                        help="answers per step: rate x this (50 at least), default 10: a p99 over fewer wakes "
                             "is the slowest one or two")
    parser.add_argument("--steady-seconds", type=float, default=120.0,
                        help="length of the steady phase (its wakes are the tables); the answers left after it go "
                             "out at --drain-rate and count for losses only; default 120")
    parser.add_argument("--drain-rate", type=float, default=40.0, help="answers/s after the steady phase, default 40")
    parser.add_argument("--warmup", type=int, default=20,
                        help="answers before the capacity probe, in no figure but losses (each process's first "
                             "answers pay once for what it has not done yet), default 20")
    parser.add_argument("--per-user", type=int, default=10, help="pending asks per web user (2 sockets each), default 10")
    parser.add_argument("--create-concurrency", type=int, default=20, help="creations in flight, default 20")
    parser.add_argument("--yardstick-seconds", type=float, default=5.0)
    parser.add_argument("--idle-seconds", type=float, default=15.0,
                        help="seconds the servers' CPU is measured with everything parked, before the answers")
    parser.add_argument("--bound", type=float, default=600.0,
                        help="seconds after the last answer during which REST waits still re-poll, default 600")
    parser.add_argument("--keep", action="store_true", help="keep the data dir with the server logs (debugging)")
    add_rounds_argument(parser)
    args = parser.parse_args(argv)
    check_rounds(parser, args.repeat)
    if not 3 <= args.waiters <= 20000 or args.rate < 0 or not 1 <= args.per_user <= 100:
        parser.error("--waiters 3..20000, --rate >= 0, --per-user 1..100")
    if not 0 <= args.capacity_steps <= 20 or args.capacity_start <= 0 or not 1 <= args.capacity_seconds <= 60:
        parser.error("--capacity-steps 0..20, --capacity-start > 0, --capacity-seconds 1..60")
    if args.steady_seconds <= 0 or args.drain_rate <= 0 or not 0 <= args.warmup <= 200:
        parser.error("--steady-seconds and --drain-rate > 0, --warmup 0..200")
    if not args.rate and not args.capacity_steps:
        parser.error("--capacity-steps 0 needs a --rate")

    nofile = raise_nofile_limit()  # before the servers start: they inherit it
    users = math.ceil(args.waiters / args.per_user)
    client_fds = 2 * users + 2 * args.waiters // 3 + 200
    if nofile[0] < client_fds:
        say(f"warning: open-file limit {nofile[0]} < {client_fds} this client needs; sockets may run out")
    run_rounds("askcards scale-out benchmark", args.repeat, lambda _: figures(one_round(args, nofile, users)),
               note=f"{args.waiters:,} waiters on two processes; the targets are for {TARGET_WAITERS:,}: capacity >= "
                    f"{CAPACITY_TARGET:.0f} answers/s (wake p99 < {WAKE_P99_TARGET_MS:.0f} ms, 0 lost), then "
                    f">= {STEADY_SECONDS_TARGET:.0f} s at that rate with p99 < {WAKE_P99_TARGET_MS:.0f} ms, "
                    f"<= {KB_PER_WAITER_TARGET:.0f} kB per parked connection")
    return 0


def one_round(args: argparse.Namespace, nofile: tuple[int, int], users: int) -> dict[str, Any]:
    """A fresh database, Redis DB and servers, the whole measurement, its report printed; the report."""
    data_dir = Path(tempfile.mkdtemp(prefix="askcards-bench-scaleout-"))
    db_name = create_database()
    flush_redis()
    env = bench_env(data_dir, DATABASE_URL=f"postgres://postgres@{HOST}:5432/{db_name}", REDIS_URL=REDIS_URL)
    procs = Processes(data_dir)

    def stopped(signum: int, frame: Any) -> None:
        """Stopped by hand (Ctrl-C, kill): asyncio's own SIGINT handling only cancels the run's main
        task, which thousands of parked client tasks outlive, so clean up here and leave."""
        say(f"stopped by signal {signum}: stopping the servers, dropping {db_name}, flushing Redis")
        for _, server, _ in procs.started:
            stop_server(server)
        try:
            drop_database(db_name)
        finally:
            flush_redis()
            shutil.rmtree(data_dir, ignore_errors=True)
            os._exit(128 + signum)

    signal.signal(signal.SIGINT, stopped)
    signal.signal(signal.SIGTERM, stopped)
    try:
        say(f"setup: database {db_name}, Redis {REDIS_URL} (flushed), {users} web users, data dir {data_dir}")
        run_manage(env, "migrate", "--no-input", "-v", "0")
        # Users with no usable password, made in one statement: no password hashing per user.
        fixture = seed_fixture(env, [f"bench{u:05d}" for u in range(users)])
        analyze(env["DATABASE_URL"])
        ports = [free_port(), free_port()]
        servers: list[subprocess.Popen] = []
        for n, extra in enumerate(([], ["--no-worker"])):
            servers.append(procs.start(f"server-{NAMES[n]}", serve_command(ports[n], "--no-migrate", *extra), env))
        say(f"server A pid {servers[0].pid} on :{ports[0]} (with the worker), B pid {servers[1].pid} on :{ports[1]}")
        budget = 1200 + args.waiters / 5 + args.steady_seconds + args.waiters / args.drain_rate
        collector.settle()  # the client's own full collections would count as late wakes (the servers do the same)
        report = asyncio.run(asyncio.wait_for(bench(args, ports, procs, servers, fixture, env["DATABASE_URL"]), budget))
        print_report(args, report, nofile)
        return report
    except BaseException:
        for n in range(len(procs.started)):
            tail = procs.tail(f"server-{NAMES[n]}")
            if tail.strip():
                say(f"--- server {NAMES[n]} log tail ---\n{tail}\n---")
        raise
    finally:
        procs.stop_all()
        try:
            drop_database(db_name)
        finally:
            flush_redis()
            if args.keep:
                say(f"kept {data_dir}")
            else:
                shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
