"""Long-poll benchmark: N agents parked on ``GET /asks/{id}/wait``, woken by panel answers.

Run from the project directory (not collected by pytest: the file is not named test_*):

    .venv/bin/python -m tests.bench.bench_longpoll [--waiters 2000] [--rate 100] [--port 0]

What it does, every step bounded in time and count, every connection to 127.0.0.1 only:

1. A throwaway data dir (embedded default: SQLite + in-process wakes; DATABASE_URL and
   REDIS_URL are removed from the environment), ``migrate``, then the fixture
   (``tests.bench.harness.seed_fixture``): a Django user, a logged-in session for the user and the
   agent ``bench`` granted the user, its quotas lifted. The session cookie is made directly with
   ``django.contrib.sessions`` (``SessionStore`` holding the user's id, backend and session-auth
   hash: exactly what ``django.contrib.auth.login`` stores), not by posting the admin login form.
2. ``manage.py serve 127.0.0.1:<port>`` as a subprocess (it inherits the raised open-file limit).
3. ONE panel WebSocket (``/ws/panel/``, cookie + Origin), so the web surface is reachable.
4. A web session and N ``ask_user_questions`` asks (20 creations in flight at a time); the panel
   gets one ``ask_user_questions`` message per ask.
5. N concurrent ``GET /api/v1/asks/{id}/wait?timeout=60``; once all are sent and the server has gone
   quiet (CPU idle), the server's RSS is sampled ("RSS with all waiters parked").
6. The asks are answered over the panel socket at a steady rate; each wait's wake time minus its
   answer's send time is its answer-to-wake latency; each wait's body must be that ask, answered,
   with the label sent for it.
7. Capacity: on the same server and socket, fresh asks answered at rising steady rates (doubling
   from 20/s, then bisecting) find the highest rate whose wake p99 stays under 100 ms with nothing
   lost; it is printed divided by the trivial view's throughput (8), a ratio that compares across
   machines where a fixed ``--rate`` says more about the machine than about askcards.
8. Yardstick: the same server's throughput on tiny views (20 keep-alive clients, fixed duration).
9. The server is stopped (SIGTERM, then kill) and the data dir removed, always.

Figures are printed, not asserted; see docs/performance.md for the targets.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench.common import (
    Figure,
    add_rounds_argument,
    at_least,
    at_most,
    below,
    check_rounds,
    exactly,
    percentile,
    run_rounds,
    say,
)
from tests.bench.harness import (
    CAPACITY_P99_MS,
    HOST,
    MISSING_ASK,
    PASSWORD,
    Fixture,
    Processes,
    Profiler,
    answer_steadily,
    bench_env,
    free_port,
    mb,
    memory_sampler,
    panel_socket,
    proc_cpu_seconds,
    proc_status,
    raise_nofile_limit,
    run_manage,
    search_capacity,
    seed_fixture,
    serve_command,
    settle_tasks,
    until,
    wait_quiet,
    wait_until_serving,
    web_session,
    yardstick,
)

USERNAME = "benchuser"
CAPACITY_RATIO_TARGET = 0.5  # capacity (answers/s) over the trivial view's req/s, at least
CPU_RATIO_TARGET = 3.0  # server CPU per answer + wake over a trivial request's, at most
PEAK_MB_TARGET = 400.0


# ------------------------------------------------------------------------------------------ state


@dataclass
class AskInfo:
    id: str
    question: str
    label: str
    answer_sent: float | None = None


@dataclass
class Panel:
    ws: aiohttp.ClientWebSocketResponse
    shown: set[str] = field(default_factory=set)
    acks: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    other: list[Any] = field(default_factory=list)
    closed: str | None = None

    async def read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                kind = data.get("type")
                if kind == "ask_user_questions":
                    self.shown.add(data["requestId"])
                elif kind == "ask_user_questions_ack":
                    self.acks[data["requestId"]] = data
                elif kind == "ask_user_questions_cancelled":
                    self.cancelled.add(data["requestId"])
                elif kind not in ("history", "history_add") and len(self.other) < 20:  # the panel's closed-ask list
                    self.other.append(data)
        finally:
            self.closed = f"closed (code {self.ws.close_code})"


@dataclass
class WaitResult:
    sent: float | None = None
    arrived: float | None = None
    status: int | None = None
    body: bytes | None = None
    error: str | None = None


# ---------------------------------------------------------------------------------------- phases


async def create_asks(http: aiohttp.ClientSession, base: str, headers: dict[str, str], count: int, concurrency: int,
                      timeout_seconds: int) -> list[AskInfo]:
    semaphore = asyncio.Semaphore(concurrency)
    asks: list[AskInfo | None] = [None] * count
    failures: list[str] = []

    async def one(index: int) -> None:
        question = f"Bench question {index}: which one?"
        payload = {
            "session": "bench/web",
            "name": "ask_user_questions",
            "arguments": {
                "questions": [
                    {
                        "question": question,
                        "header": "bench",
                        "options": [{"label": "Alpha", "description": "first"}, {"label": "Beta"}],
                    }
                ]
            },
            "timeout_seconds": timeout_seconds,
        }
        async with semaphore:
            async with http.post(f"{base}/api/v1/tools/call", json=payload, headers=headers) as resp:
                body = await resp.text()
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if resp.status != 200 or not data or data.get("status") != "pending" or not data.get("ask"):
            if len(failures) < 5:
                failures.append(f"HTTP {resp.status}: {body[:300]}")
            return
        asks[index] = AskInfo(id=data["ask"]["id"], question=question, label="Alpha" if index % 2 == 0 else "Beta")

    results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    created = [a for a in asks if a is not None]
    if len(created) != count:
        detail = "; ".join(failures + [repr(e) for e in errors[:3]])
        raise RuntimeError(f"only {len(created)}/{count} asks were created pending: {detail}")
    return created


def check_waits(asks: list[AskInfo], results: dict[str, WaitResult],
                wait_timeout: float) -> tuple[list[float], dict[str, int], list[str]]:
    """Each wait's body must be its own ask, answered, with the label sent for it: the
    answer-to-wake latencies (s) of those that were, what went wrong with the rest (kind -> count)
    and up to five examples."""
    latencies: list[float] = []
    lost: dict[str, int] = {}
    examples: list[str] = []

    def bad(kind: str, detail: str) -> None:
        lost[kind] = lost.get(kind, 0) + 1
        if len(examples) < 5:
            examples.append(f"{kind}: {detail}")

    for ask in asks:
        result = results[ask.id]
        if result.error or result.body is None:
            bad("error/never returned", f"{ask.id} {result.error}")
            continue
        if result.status != 200:
            bad(f"HTTP {result.status}", f"{ask.id} {result.body[:200]!r}")
            continue
        try:
            data = json.loads(result.body)
        except ValueError:
            bad("not JSON", f"{ask.id} {result.body[:200]!r}")
            continue
        if data.get("id") != ask.id:
            bad("another ask", f"{ask.id} got {data.get('id')}")
            continue
        if data.get("status") != "answered":
            kind = f"status {data.get('status')}"
            if data.get("status") == "pending" and result.sent and result.arrived:
                timed_out = result.arrived - result.sent >= wait_timeout - 1
                kind += " (wait timed out before its answer woke it)" if timed_out else " (returned early)"
            bad(kind, f"{ask.id} reason {data.get('reason')}")
            continue
        answers = (data.get("result") or {}).get("answers") or [{}]
        if answers[0].get("selectedLabels") != [ask.label]:
            bad("wrong answer", f"{ask.id} expected {[ask.label]} got {answers[0].get('selectedLabels')}")
            continue
        if ask.answer_sent is None or result.arrived is None:
            bad("no timing", ask.id)
            continue
        latencies.append(result.arrived - ask.answer_sent)
    latencies.sort()
    return latencies, lost, examples


async def capacity_round(http: aiohttp.ClientSession, base: str, auth: dict[str, str], panel: Panel,
                         args: argparse.Namespace, rate: float) -> dict[str, Any]:
    """One step of the capacity search: ``rate`` x ``--capacity-seconds`` asks (50..3000), each
    with a parked long-poll, answered over the panel at ``rate`` a second: wake p50/p99 and losses."""
    count = max(50, min(3000, round(rate * args.capacity_seconds)))
    asks = await create_asks(http, base, auth, count, args.create_concurrency, 3600)
    ids = {a.id for a in asks}
    await until(lambda: ids <= panel.shown, 60)
    results = {a.id: WaitResult() for a in asks}
    timeout = aiohttp.ClientTimeout(total=args.wait_timeout + 30, connect=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as waiters:

        async def wait_one(ask: AskInfo) -> None:
            result = results[ask.id]
            result.sent = time.monotonic()
            try:
                async with waiters.get(f"{base}/api/v1/asks/{ask.id}/wait?timeout={args.wait_timeout}",
                                       headers=auth) as resp:
                    result.body = await resp.read()
                    result.arrived, result.status = time.monotonic(), resp.status
            except Exception as exc:  # noqa: BLE001 - every failure is a lost wait
                result.arrived, result.error = time.monotonic(), f"{type(exc).__name__}: {exc}"[:200]

        tasks = [asyncio.ensure_future(wait_one(a)) for a in asks]
        await asyncio.sleep(1.0 + count / 1000)  # every wait parked before the first answer
        _, slip_ms = await answer_steadily([(panel.ws, ask.id, ask) for ask in asks], rate)
        await settle_tasks(tasks, args.wait_timeout + 35)
    await until(lambda: ids <= set(panel.acks), 30)
    latencies, lost, _ = check_waits(asks, results, args.wait_timeout)
    ms = [x * 1000 for x in latencies]
    return {"rate": rate, "asks": count, "p50": percentile(ms, 50), "p99": percentile(ms, 99),
            "lost": count - len(latencies), "slip_ms": slip_ms}


async def find_capacity(http: aiohttp.ClientSession, base: str, auth: dict[str, str], panel: Panel,
                        args: argparse.Namespace) -> list[dict[str, Any]]:
    """The highest steady answer rate with wake p99 under 100 ms and nothing lost (``search_capacity``
    over ``capacity_round``s from ``--capacity-start``, ``--capacity-steps`` steps in all)."""
    return await search_capacity(lambda rate: capacity_round(http, base, auth, panel, args, rate),
                                 args.capacity_start, args.capacity_steps)


async def bench(args: argparse.Namespace, base: str, port: int, procs: Processes, pid: int,
                fixture: Fixture) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {fixture.key}"}
    report: dict[str, Any] = {"load_start": os.getloadavg()[0]}
    peak: dict[str, int] = {}
    profiler = Profiler(args.profile, pid, args.profile_gil)
    stop_sampler = asyncio.Event()
    sampler = asyncio.ensure_future(memory_sampler(pid, peak, stop_sampler))

    await wait_until_serving(base, procs.alive, path=f"/api/v1/asks/{MISSING_ASK}", headers=auth, status=None)
    report["rss_idle_kb"] = proc_status(pid).get("VmRSS", 0)

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=100)) as http:
        # --- the panel socket
        ws = await panel_socket(http, port, fixture.cookie())
        panel = Panel(ws)
        reader = asyncio.ensure_future(panel.read())
        try:
            await asyncio.sleep(0.3)
            if panel.closed:
                raise RuntimeError(f"panel socket was refused: {panel.closed}")

            # --- session + asks
            await web_session(http, base, auth, "bench/web", fixture.users[0])
            t0 = time.monotonic()
            profiler.start("create")
            asks = await create_asks(http, base, auth, args.waiters, args.create_concurrency, 3600)
            report["create_seconds"] = time.monotonic() - t0
            ids = {a.id for a in asks}
            await until(lambda: ids <= panel.shown, 60)
            report["shown"] = len(ids & panel.shown)
            report["rss_before_waiters_kb"] = proc_status(pid).get("VmRSS", 0)
            report["threads_before_waiters"] = proc_status(pid).get("Threads", 0)
            say(f"  created {len(asks)} asks in {report['create_seconds']:.1f} s; panel shown {report['shown']}")

            # --- the waiters
            results = {a.id: WaitResult() for a in asks}
            sent_count = 0
            last_sent = [time.monotonic()]

            async def on_headers_sent(session, ctx, params) -> None:
                nonlocal sent_count
                sent_count += 1
                last_sent[0] = time.monotonic()
                ctx.trace_request_ctx["result"].sent = last_sent[0]

            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(on_headers_sent)
            wait_connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
            wait_timeout = aiohttp.ClientTimeout(total=args.wait_timeout + 30, connect=30)
            async with aiohttp.ClientSession(connector=wait_connector, timeout=wait_timeout,
                                             trace_configs=[trace]) as waiters:

                async def wait_one(ask: AskInfo) -> None:
                    result = results[ask.id]
                    url = f"{base}/api/v1/asks/{ask.id}/wait?timeout={args.wait_timeout}"
                    try:
                        async with waiters.get(url, headers=auth, trace_request_ctx={"result": result}) as resp:
                            result.body = await resp.read()
                            result.arrived = time.monotonic()
                            result.status = resp.status
                    except Exception as exc:  # noqa: BLE001 - every failure is a lost wait
                        result.arrived = time.monotonic()
                        result.error = f"{type(exc).__name__}: {exc}"[:200]

                profiler.start("park")
                t_park = time.monotonic()
                tasks = [asyncio.ensure_future(wait_one(a)) for a in asks]
                await until(lambda: sent_count >= len(asks) or all(t.done() for t in tasks), 60)
                report["all_sent_seconds"] = time.monotonic() - t_park
                report["sent"] = sent_count
                await asyncio.sleep(2.0)
                quiet = await wait_quiet(pid, 30)
                report["parked_seconds"] = time.monotonic() - t_park
                report["parked_quiet_wait"] = quiet
                early = sum(1 for t in tasks if t.done())
                report["returned_before_answers"] = early
                status = proc_status(pid)
                report["rss_parked_kb"] = status.get("VmRSS", 0)
                report["hwm_parked_kb"] = status.get("VmHWM", 0)
                report["threads_parked"] = status.get("Threads", 0)
                say(f"  {sent_count} waits sent in {report['all_sent_seconds']:.1f} s; server quiet "
                    f"{report['parked_seconds']:.1f} s after the first; RSS {mb(report['rss_parked_kb']):.0f} MB, "
                    f"{report['threads_parked']} threads; {early} returned early")

                # --- answer at a steady rate over the panel socket
                profiler.start("answer")
                cpu_before = proc_cpu_seconds(pid)
                report["answer_seconds"], report["send_slip_ms"] = await answer_steadily(
                    [(ws, ask.id, ask) for ask in asks], args.rate)
                await settle_tasks(tasks, args.wait_timeout + 35)
                report["cpu_answer_phase"] = proc_cpu_seconds(pid) - cpu_before
                profiler.stop()
                await until(lambda: ids <= set(panel.acks), 30)
            report["hwm_after_waits_kb"] = proc_status(pid).get("VmHWM", 0)

            # --- check every wait
            latencies, lost, examples = check_waits(asks, results, args.wait_timeout)
            report["latencies_ms"] = [x * 1000 for x in latencies]
            report["lost"] = lost
            report["lost_examples"] = examples
            report["acks_ok"] = sum(1 for a in asks if panel.acks.get(a.id, {}).get("ok") is True)
            report["acks_bad"] = [panel.acks[a.id] for a in asks if a.id in panel.acks and not panel.acks[a.id].get("ok")][:3]
            report["acks_missing"] = sum(1 for a in asks if a.id not in panel.acks)
            report["panel_other"] = panel.other[:3]
            report["waiters"] = len(asks)
            if args.capacity_steps:
                say("  capacity search (fresh asks, same server and panel socket):")
                report["capacity"] = await find_capacity(http, base, auth, panel, args)
        finally:
            profiler.stop()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            if not ws.closed:
                await ws.close()

    # --- yardstick (after the waits: the server is idle again)
    report["yardstick_drf"] = await yardstick(
        base, f"/api/v1/asks/{MISSING_ASK}", auth, args.yardstick_clients, args.yardstick_seconds, 404, pid
    )
    report["yardstick_django"] = await yardstick(
        base, "/admin/", {}, args.yardstick_clients, args.yardstick_seconds, 302, pid
    )
    stop_sampler.set()
    await sampler
    report["peak"] = dict(peak)
    report["hwm_end_kb"] = proc_status(pid).get("VmHWM", 0) or peak.get("hwm", 0)
    return report


def print_report(args: argparse.Namespace, report: dict[str, Any], nofile: tuple[int, int]) -> None:
    lat = report["latencies_ms"]
    n = report["waiters"]
    lost_total = n - len(lat)
    say()
    say("=== askcards long-poll benchmark (embedded default: SQLite + in-process wakes, one daphne process) ===")
    say(f"waiters {n}, answer rate {args.rate}/s, wait timeout {args.wait_timeout} s, open-file limit {nofile[0]}, "
        f"cores {os.cpu_count()}, load average at start {report['load_start']:.1f} / end {os.getloadavg()[0]:.1f} "
        "(other processes on this machine skew every figure)")
    say(f"setup: {n} asks created in {report['create_seconds']:.1f} s "
        f"({n / report['create_seconds']:.0f}/s, {args.create_concurrency} in flight); "
        f"panel received {report['shown']}/{n} ask messages")
    say(f"parking: {report['sent']}/{n} waits sent in {report['all_sent_seconds']:.1f} s; server quiet "
        f"{report['parked_seconds']:.1f} s after the first; {report['returned_before_answers']} returned before any answer")
    say(f"answers: {n} sent over the panel socket in {report['answer_seconds']:.1f} s "
        f"(max schedule slip {report['send_slip_ms']:.0f} ms); server CPU during answers+wakes "
        f"{report['cpu_answer_phase']:.1f} s = {answer_cpu_ms(report):.2f} ms per answer + wake")
    say()
    say(f"answer-to-wake latency (ms): p50 {percentile(lat, 50):.1f}   p99 {percentile(lat, 99):.1f}   "
        f"max {lat[-1] if lat else float('nan'):.1f}   (n={len(lat)}; min {lat[0] if lat else float('nan'):.1f}, "
        f"p90 {percentile(lat, 90):.1f})")
    say(f"lost or wrong waits: {lost_total}" + (f"  {report['lost']}" if report["lost"] else ""))
    for example in report["lost_examples"]:
        say(f"    e.g. {example}")
    say(f"acks ok: {report['acks_ok']}/{n}" + (f"  (missing {report['acks_missing']}; bad e.g. {report['acks_bad']})"
                                               if report["acks_ok"] != n else ""))
    per_waiter = (report["rss_parked_kb"] - report["rss_before_waiters_kb"]) / max(1, n)
    say(f"server RSS with all waiters parked: {mb(report['rss_parked_kb']):.0f} MB "
        f"(idle after start {mb(report['rss_idle_kb']):.0f} MB, after creating the asks "
        f"{mb(report['rss_before_waiters_kb']):.0f} MB, ~{per_waiter:.0f} kB per parked waiter); "
        f"threads {report['threads_before_waiters']} -> {report['threads_parked']}")
    say(f"peak server memory (VmHWM): {mb(report['hwm_after_waits_kb']):.0f} MB through the long-poll phase, "
        f"{mb(report['hwm_end_kb']):.0f} MB at the end; max threads seen {report['peak'].get('threads', 0)}")
    if report["panel_other"]:
        say(f"panel: unexpected messages e.g. {report['panel_other']}")
    say()
    for name, label in (("yardstick_drf", f"GET /api/v1/asks/{MISSING_ASK[:6]}… (DRF, Bearer auth, 404)"),
                        ("yardstick_django", "GET /admin/ (plain Django view, 302 to login)")):
        y = report[name]
        extra = f"  unexpected {y['unexpected']}" if y["unexpected"] else ""
        say(f"YARDSTICK {label}: {y['rps']:.0f} req/s, p50 {y['p50']:.1f} ms, p99 {y['p99']:.1f} ms, server CPU "
            f"{y['cpu_ms']:.2f} ms per request ({args.yardstick_clients} keep-alive clients, "
            f"{args.yardstick_seconds:.0f} s, {y['requests']} requests){extra}")
    say(f"CPU RATIO: server CPU per answer + wake over a trivial request's (GET /admin/): "
        f"{answer_cpu_ms(report):.2f} / {report['yardstick_django']['cpu_ms']:.2f} = {cpu_ratio(report):.2f}x")
    say()
    if report.get("capacity"):
        held = [step["rate"] for step in report["capacity"] if step["held"]]
        best = max(held, default=0.0)
        trivial = report["yardstick_django"]["rps"]
        say(f"CAPACITY: highest steady answer rate with wake p99 < {CAPACITY_P99_MS:.0f} ms and 0 lost: "
            + (f"{best:.0f} answers/s" if held else f"none (the first step, {args.capacity_start:.0f}/s, missed)")
            + f" ({len(report['capacity'])} steps); the same server's trivial view {trivial:.0f} req/s")
        say(f"CAPACITY RATIO (comparable across machines): {best:.0f} / {trivial:.0f} = "
            f"{best / trivial if trivial else float('nan'):.3f} answers per trivial request")
        say()
    p99 = percentile(lat, 99)
    peak_mb = mb(report["hwm_after_waits_kb"])
    verdicts = [f"wake p99 < 100 ms [{'ok' if p99 < 100 else 'MISSED'}]",
                f"0 lost [{'ok' if lost_total == 0 else 'MISSED'}]",
                f"< {PEAK_MB_TARGET:.0f} MB for {n} waiters [{'ok' if peak_mb < PEAK_MB_TARGET else 'MISSED'}]",
                f"CPU per answer + wake <= {CPU_RATIO_TARGET:g}x a trivial request's "
                f"[{'ok' if cpu_ratio(report) <= CPU_RATIO_TARGET else 'MISSED'}]"]
    if report.get("capacity"):
        verdicts.append(f"capacity ratio >= {CAPACITY_RATIO_TARGET:g} "
                        f"[{'ok' if capacity_ratio(report) >= CAPACITY_RATIO_TARGET else 'MISSED'}]")
    say("targets (printed, not asserted): " + ", ".join(verdicts))


def answer_cpu_ms(report: dict[str, Any]) -> float:
    """Server CPU per answer and its wake (the answer phase's CPU over the waiters), ms."""
    return report["cpu_answer_phase"] / max(1, report["waiters"]) * 1000


def cpu_ratio(report: dict[str, Any]) -> float:
    trivial = report["yardstick_django"]["cpu_ms"]
    return answer_cpu_ms(report) / trivial if trivial > 0 else float("nan")


def capacity_ratio(report: dict[str, Any]) -> float:
    best = max((step["rate"] for step in report.get("capacity") or [] if step["held"]), default=0.0)
    trivial = report["yardstick_django"]["rps"]
    return best / trivial if trivial else float("nan")


def figures(report: dict[str, Any]) -> list[Figure]:
    """What one round printed, for the summary over the rounds."""
    lat = report["latencies_ms"]
    n = report["waiters"]
    found = [
        Figure("answer-to-wake p50", percentile(lat, 50), "ms"),
        Figure("answer-to-wake p99", percentile(lat, 99), "ms", below(100)),
        Figure("answer-to-wake max", lat[-1] if lat else float("nan"), "ms"),
        Figure("lost or wrong waits", n - len(lat), "", exactly(0)),
        Figure("acks not ok", n - report["acks_ok"], "", exactly(0)),
        Figure("server RSS, all waiters parked", mb(report["rss_parked_kb"]), "MB"),
        Figure("kB per parked waiter", (report["rss_parked_kb"] - report["rss_before_waiters_kb"]) / max(1, n), "kB"),
        Figure("peak server memory (VmHWM)", mb(report["hwm_after_waits_kb"]), "MB", below(PEAK_MB_TARGET)),
        Figure("server threads, all parked", report["threads_parked"]),
        Figure("parking: waits sent and server quiet", report["parked_seconds"], "s"),
        Figure("server CPU per answer + wake", answer_cpu_ms(report), "ms"),
        Figure("YARDSTICK DRF view", report["yardstick_drf"]["rps"], "req/s"),
        Figure("YARDSTICK GET /admin/ (trivial view)", report["yardstick_django"]["rps"], "req/s"),
        Figure("server CPU per trivial request", report["yardstick_django"]["cpu_ms"], "ms"),
        Figure("CPU per answer + wake / trivial request's", cpu_ratio(report), "x", at_most(CPU_RATIO_TARGET)),
    ]
    if report.get("capacity"):
        best = max((step["rate"] for step in report["capacity"] if step["held"]), default=0.0)
        found += [Figure("CAPACITY (p99 < 100 ms, 0 lost)", best, "answers/s"),
                  Figure("CAPACITY RATIO to the trivial view", capacity_ratio(report), "",
                         at_least(CAPACITY_RATIO_TARGET))]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=2000, help="concurrent long-polls (asks), default 2000")
    parser.add_argument("--rate", type=float, default=100.0, help="answers per second, default 100")
    parser.add_argument("--port", type=int, default=0, help="server port on 127.0.0.1; 0 picks a free one")
    parser.add_argument("--wait-timeout", type=int, default=60, help="the long-polls' ?timeout=, default 60 (max)")
    parser.add_argument("--create-concurrency", type=int, default=20, help="ask creations in flight, default 20")
    parser.add_argument("--yardstick-clients", type=int, default=20)
    parser.add_argument("--yardstick-seconds", type=float, default=10.0)
    parser.add_argument("--capacity-steps", type=int, default=8,
                        help="steps of the capacity search (highest rate with wake p99 < 100 ms); 0 skips it, default 8")
    parser.add_argument("--capacity-start", type=float, default=20.0, help="its first rate, answers/s, default 20")
    parser.add_argument("--capacity-seconds", type=float, default=5.0,
                        help="seconds of answers per step (rate x seconds asks, 50..3000), default 5")
    parser.add_argument("--profile", metavar="PREFIX", help="py-spy record the server per phase into PREFIX-<phase>.txt")
    parser.add_argument("--profile-gil", action="store_true", help="with --profile: sample only the GIL holder")
    parser.add_argument("--keep", action="store_true", help="keep the temp data dir and server log (debugging)")
    add_rounds_argument(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.waiters <= 20000 or args.rate <= 0 or not 1 <= args.wait_timeout <= 60:
        parser.error("--waiters 1..20000, --rate > 0, --wait-timeout 1..60")
    if not 0 <= args.capacity_steps <= 20 or args.capacity_start <= 0 or not 1 <= args.capacity_seconds <= 60:
        parser.error("--capacity-steps 0..20, --capacity-start > 0, --capacity-seconds 1..60")
    check_rounds(parser, args.repeat)

    nofile = raise_nofile_limit()  # before the server starts: it inherits the limit
    needed = args.waiters + 200
    if nofile[0] < needed:
        say(f"warning: open-file limit {nofile[0]} < {needed}; sockets may run out")
    run_rounds("askcards long-poll benchmark", args.repeat, lambda _: figures(one_round(args, nofile)),
               note=f"{args.waiters} waiters, {args.rate:g} answers/s; targets of docs/performance.md (2000 "
                    "waiters at 100 answers/s for the memory one)")
    return 0


def one_round(args: argparse.Namespace, nofile: tuple[int, int]) -> dict[str, Any]:
    """A fresh data dir and server, the whole measurement, its report printed; the report."""
    port = args.port or free_port()
    base = f"http://{HOST}:{port}"
    data_dir = Path(tempfile.mkdtemp(prefix="askcards-bench-"))
    env = bench_env(data_dir, panel_page=True)
    procs = Processes(data_dir)
    try:
        say(f"setup in {data_dir}")
        run_manage(env, "migrate", "--no-input", "-v", "0")
        fixture = seed_fixture(env, [USERNAME], password=PASSWORD)
        server = procs.start("server", serve_command(port), env)
        say(f"server pid {server.pid} on {base}")
        report = asyncio.run(asyncio.wait_for(bench(args, base, port, procs, server.pid, fixture), 600))
        print_report(args, report, nofile)
        return report
    except BaseException:
        tail = procs.tail("server", 4000)
        if tail.strip():
            say(f"--- server log tail ---\n{tail}\n---")
        raise
    finally:
        procs.stop_all()
        if args.keep:
            say(f"kept {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
