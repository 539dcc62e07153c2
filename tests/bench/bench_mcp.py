"""MCP benchmark: N blocking ``tools/call``s of ``ask_user_questions`` parked on one ``serve``,
woken by panel answers, next to the same number of REST long-polls (``POST /api/v1/tools/call``
with ``wait``) on the same machine in the same run.

Run from the project directory (not collected by pytest: the file is not named test_*):

    .venv/bin/python -m tests.bench.bench_mcp [--calls 1000] [--rate 50] [--quick]

What it does, every step bounded in time and count, every connection to 127.0.0.1 only:

1. A throwaway data dir (embedded default: SQLite + in-process wakes; DATABASE_URL and
   REDIS_URL are removed from the environment), ``migrate``, then the fixture
   (``tests.bench.harness.seed_fixture``, as in bench_longpoll): a Django user, a logged-in
   session for the user (written with ``django.contrib.sessions``) and the agent ``bench`` granted
   the user, its quotas lifted.
2. For each variant (``rest``, ``mcp``, ``mcp2026``, in that order by default), all of the above in
   a data dir of its own and a fresh ``manage.py serve 127.0.0.1:<port>`` on it (so every variant
   starts from the same state), ONE panel WebSocket and a web session (``bench/<variant>``).
3. Warm-up: ``--warmup`` calls of the variant, parked and answered (loads what the first call
   loads: the SDK's models, the pools), then the server's RSS once it is idle ("before").
4. N calls, each creating its ask and parking until it ends:
   - ``rest``: ``POST /api/v1/tools/call`` ``{session, name, arguments, timeout_seconds, wait: 60}``
     (JSON response);
   - ``mcp``: ``POST /mcp?session=bench/mcp&platform=web&web_user=<user>``, a stateless legacy
     request (no initialize): ``Accept: application/json, text/event-stream``,
     ``Content-Type: application/json``, ``MCP-Protocol-Version: 2025-11-25``, the Bearer key, body
     ``{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {name, arguments,
     _meta: {"io.askcards/timeout_seconds": …}}}``; the response is an SSE stream whose
     ``event: message`` with that id carries the result;
   - ``mcp2026``: the same POST on the 2026-07-28 wire (``MCP-Protocol-Version: 2026-07-28``,
     ``Mcp-Method``, ``Mcp-Name`` and the per-request envelope in ``_meta``), served by the SDK's
     single-exchange path: JSON when the result comes within 15 s, else SSE with pings.
   At most ``--create-concurrency`` calls whose ask the panel has not shown yet are in flight; once
   all N asks are shown, 2 s passed and the server's CPU went idle, its RSS is sampled ("parked").
5. The asks are answered over the panel socket at ``--rate`` per second on a fixed schedule, in the
   order they were created (as bench_longpoll does); each call's wake latency is when its result
   arrived minus when its answer was sent; each result must be that ask, answered, with the label
   sent for it.
6. Yardstick: that server's throughput on tiny views (as in bench_longpoll), then the server is
   stopped (SIGTERM, then kill).
7. Figures per variant and the ratios MCP / REST (target: within 1.25x on wake p99 and on memory
   per parked call). The data dirs are removed, always.

``--rounds N`` runs all of it N times (fresh data dirs and servers each round) and ends with the
min / median / max of every figure over the rounds (tests/bench/common.py).

Figures are printed, not asserted; see docs/performance.md. ``--tracemalloc FRAMES`` runs the
servers under a wrapper that traces allocations from the "before" sample on and prints where the
parked calls' memory went (by package and line) and the event-loop tasks per parked call.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp

from tests.bench.common import Figure, add_rounds_argument, at_most, check_rounds, exactly, percentile, run_rounds, say
from tests.bench.harness import (
    HOST,
    LEGACY_VERSION,
    MCP_VARIANTS,
    MISSING_ASK,
    MODERN_VERSION,
    PASSWORD,
    PROJECT_DIR,
    PYTHON,
    REST_WAIT,
    Call,
    Fixture,
    Processes,
    Profiler,
    answer_steadily,
    bench_env,
    check,
    free_port,
    mb,
    mcp_call,
    memory_sampler,
    panel_socket,
    park,
    proc_cpu_seconds,
    proc_status,
    questions_for,
    raise_nofile_limit,
    run_manage,
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
VARIANTS = {
    "rest": "REST: POST /api/v1/tools/call with wait=60 (JSON)",
    "mcp": f"MCP {LEGACY_VERSION}: POST /mcp tools/call, stateless legacy request (SSE)",
    "mcp2026": f"MCP {MODERN_VERSION}: POST /mcp tools/call, single-exchange request (SSE after 15 s)",
}
TARGET_RATIO = 1.25  # MCP over REST, at most: wake p99 and memory per parked call

# --tracemalloc: the server runs under this wrapper. The first SIGUSR1 starts tracemalloc (so the
# start-up is not slowed down); each one dumps a snapshot into $BENCH_SNAPSHOT_DIR/snap-<pid>-<n>.tm
# (written to a temporary name, then renamed) and the event loop's tasks, counted by name, into
# snap-<pid>-<n>.tasks.json beside it. The handler runs on the main thread, the event loop's.
TRACEMALLOC_WRAPPER = r"""
import asyncio, collections, itertools, json, os, runpy, signal, sys, tracemalloc
count = itertools.count(1)
def task_name(task):
    name = task.get_name()
    return getattr(task.get_coro(), "__qualname__", repr(task.get_coro())) if name.startswith("Task-") else name
def dump(signum, frame):
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ["BENCH_TRACEMALLOC_FRAMES"]))
    path = os.path.join(os.environ["BENCH_SNAPSHOT_DIR"], f"snap-{os.getpid()}-{next(count)}")
    tracemalloc.take_snapshot().dump(path + ".tmp")
    try:
        tasks = asyncio.all_tasks(asyncio.get_running_loop())
    except RuntimeError:
        tasks = set()
    with open(path + ".tasks.json", "w") as fh:
        json.dump(collections.Counter(task_name(t) for t in tasks), fh)
    os.rename(path + ".tmp", path + ".tm")
signal.signal(signal.SIGUSR1, dump)
sys.argv = ["manage.py", *sys.argv[1:]]
runpy.run_path("manage.py", run_name="__main__")
"""
# Frames that only carry a call (the standard library, async and validation plumbing): an
# allocation is charged to the innermost frame outside them.
PLUMBING = ("anyio", "pydantic", "pydantic_core", "asgiref", "opentelemetry", "typing_extensions")


# ------------------------------------------------------------------------------------------ state


@dataclass
class PanelReader:
    """The panel socket: which ask shows which question, and the acks of our answers."""

    ws: aiohttp.ClientWebSocketResponse
    by_question: dict[str, Call] = field(default_factory=dict)
    by_ask: dict[str, Call] = field(default_factory=dict)
    acks: int = 0
    unknown: list[Any] = field(default_factory=list)
    closed: str | None = None

    async def read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                kind = data.get("type")
                if kind == "ask_user_questions":
                    questions = data.get("questions") or [{}]
                    call = self.by_question.get(questions[0].get("question"))
                    if call is None:
                        if len(self.unknown) < 20:
                            self.unknown.append(data.get("requestId"))
                        continue
                    if call.ask_id is None:
                        call.ask_id, call.shown_at = data["requestId"], time.monotonic()
                        self.by_ask[call.ask_id] = call
                        call.shown.set()
                elif kind == "ask_user_questions_ack":
                    call = self.by_ask.get(data.get("requestId"))
                    if call is not None:
                        call.ack = data
                        self.acks += 1
                elif kind not in ("ask_user_questions_cancelled", "history", "history_add") and len(self.unknown) < 20:
                    self.unknown.append(data)
        finally:
            self.closed = f"closed (code {self.ws.close_code})"


# ------------------------------------------------------------------------------------------ calls


async def rest_call(http: aiohttp.ClientSession, base: str, key: str, session: str, call: Call,
                    ask_timeout: int) -> None:
    payload = {
        "session": session,
        "name": "ask_user_questions",
        "arguments": {"questions": questions_for(call)},
        "timeout_seconds": ask_timeout,
        "wait": REST_WAIT,
    }
    headers = {"Authorization": f"Bearer {key}"}
    async with http.post(f"{base}/api/v1/tools/call", json=payload, headers=headers,
                         trace_request_ctx={"call": call}) as resp:
        body = await resp.read()
        call.arrived = time.monotonic()
        call.status = resp.status
    try:
        call.result = json.loads(body)
    except ValueError:
        call.error = f"not JSON: {body[:200]!r}"


# ---------------------------------------------------------------------------------------- phases


async def park_and_answer(variant: str, args: argparse.Namespace, base: str, key: str, pid: int,
                          panel: PanelReader, prefix: str, count: int, profiler: Profiler | None,
                          report: dict[str, Any] | None) -> dict[str, Any]:
    """``count`` calls parked, then answered at ``args.rate``/s; returns the checked figures. With
    ``report``, the server's RSS and threads once all are parked go into it."""
    calls = [Call(index=i, question=f"{variant} {prefix} question {i}: which one?",
                  label="Alpha" if i % 2 == 0 else "Beta") for i in range(count)]
    for call in calls:
        panel.by_question[call.question] = call
    session = f"bench/{variant}"
    query = urlencode({"session": session, "platform": "web", "web_user": USERNAME})

    async def on_headers_sent(session_, ctx, params) -> None:
        call = (ctx.trace_request_ctx or {}).get("call")
        if call is not None:
            call.headers_sent = time.monotonic()

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(on_headers_sent)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_read=REST_WAIT + 40)
    window = asyncio.Semaphore(args.create_concurrency)
    figures: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[trace]) as http:

        def request(call: Call) -> Callable[[], Awaitable[None]]:
            if variant in MCP_VARIANTS:
                return lambda: mcp_call(http, base, key, query, call, args.ask_timeout, modern=variant == "mcp2026")
            return lambda: rest_call(http, base, key, session, call, args.ask_timeout)

        async def launch() -> list[asyncio.Future]:
            tasks = []
            for call in calls:
                await window.acquire()
                tasks.append(asyncio.ensure_future(park(call, request(call), window, 60)))
            return tasks

        if profiler:
            profiler.start(f"{variant}-park")
        cpu_park = proc_cpu_seconds(pid)
        t_park = time.monotonic()
        launcher = asyncio.ensure_future(launch())
        launch_bound = (60 + count / 5) * (5 if args.tracemalloc else 1)  # tracing slows the server down
        await until(lambda: launcher.done() and all(c.shown.is_set() or c.done for c in calls), launch_bound)
        tasks = await asyncio.wait_for(launcher, 5) if launcher.done() else []
        if not launcher.done():
            launcher.cancel()
            raise RuntimeError(f"{variant}: the calls were not all launched within {launch_bound:.0f} s")
        figures["created_seconds"] = time.monotonic() - t_park
        figures["cpu_park_phase"] = proc_cpu_seconds(pid) - cpu_park
        figures["shown"] = sum(1 for c in calls if c.shown.is_set())
        if report is not None:
            await asyncio.sleep(2.0)
            report["parked_quiet_wait"] = await wait_quiet(pid, 30)
            status = proc_status(pid)
            report["parked_at_sample"] = sum(1 for c in calls if not c.done)
            report["rss_parked_kb"] = status.get("VmRSS", 0)
            report["hwm_parked_kb"] = status.get("VmHWM", 0)
            report["threads_parked"] = status.get("Threads", 0)
            report["parked_seconds"] = time.monotonic() - t_park
            if args.tracemalloc:
                report["snapshot_parked"] = await snapshot(pid, args.snapshot_dir)
        figures["returned_early"] = sum(1 for c in calls if c.done)

        # --- answer at a steady rate over the panel socket, in creation order
        if profiler:
            profiler.start(f"{variant}-answer")
        cpu_before = proc_cpu_seconds(pid)
        order = sorted((c for c in calls if c.ask_id), key=lambda c: c.shown_at or 0.0)
        figures["answer_seconds"], figures["send_slip_ms"] = await answer_steadily(
            [(panel.ws, call.ask_id, call) for call in order], args.rate)
        await settle_tasks(tasks, REST_WAIT + 45)
        figures["cpu_answer_phase"] = proc_cpu_seconds(pid) - cpu_before
        if profiler:
            profiler.stop()
        await until(lambda: all(c.ack is not None for c in order), 30)

    latencies: list[float] = []
    lost: dict[str, int] = {}
    examples: list[str] = []
    for call in calls:
        problem = check(variant, call)
        if problem is None:
            latencies.append(call.arrived - call.answer_sent)
            continue
        kind, detail = problem
        lost[kind] = lost.get(kind, 0) + 1
        if len(examples) < 5:
            examples.append(f"{kind}: {detail}")
    latencies.sort()
    figures.update({
        "calls": count,
        "latencies_ms": [x * 1000 for x in latencies],
        "lost": lost,
        "lost_examples": examples,
        "acks_ok": sum(1 for c in calls if (c.ack or {}).get("ok") is True),
    })
    for call in calls:
        panel.by_question.pop(call.question, None)
        if call.ask_id:
            panel.by_ask.pop(call.ask_id, None)
    return figures


async def run_variant(variant: str, args: argparse.Namespace, base: str, port: int, procs: Processes, pid: int,
                      fixture: Fixture) -> dict[str, Any]:
    key = fixture.key
    auth = {"Authorization": f"Bearer {key}"}
    report: dict[str, Any] = {"variant": variant, "load_start": os.getloadavg()[0]}
    peak: dict[str, int] = {}
    profiler = Profiler(args.profile, pid, args.profile_gil) if args.profile else None
    stop_sampler = asyncio.Event()
    sampler = asyncio.ensure_future(memory_sampler(pid, peak, stop_sampler))
    try:
        await wait_until_serving(base, procs.alive, path=f"/api/v1/asks/{MISSING_ASK}", headers=auth, status=None)
        report["rss_idle_kb"] = proc_status(pid).get("VmRSS", 0)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            ws = await panel_socket(http, port, fixture.cookie())
            panel = PanelReader(ws)
            reader = asyncio.ensure_future(panel.read())
            try:
                await asyncio.sleep(0.3)
                if panel.closed:
                    raise RuntimeError(f"panel socket was refused: {panel.closed}")
                await web_session(http, base, auth, f"bench/{variant}", USERNAME)
                if args.warmup:
                    warm = await park_and_answer(variant, args, base, key, pid, panel, "warm-up", args.warmup,
                                                 None, None)
                    if len(warm["latencies_ms"]) != args.warmup:
                        raise RuntimeError(f"{variant} warm-up: {warm['lost']} {warm['lost_examples']}")
                report["quiet_before"] = await wait_quiet(pid, 30)
                status = proc_status(pid)
                report["rss_before_kb"] = status.get("VmRSS", 0)
                report["threads_before"] = status.get("Threads", 0)
                if args.tracemalloc:
                    report["snapshot_before"] = await snapshot(pid, args.snapshot_dir)
                report.update(await park_and_answer(variant, args, base, key, pid, panel, "run", args.calls,
                                                    profiler, report))
                report["panel_unknown"] = panel.unknown[:3]
            finally:
                if profiler:
                    profiler.stop()
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                if not ws.closed:
                    await ws.close()
        report["hwm_after_calls_kb"] = proc_status(pid).get("VmHWM", 0)
        report["yardstick_drf"] = await yardstick(base, f"/api/v1/asks/{MISSING_ASK}", auth,
                                                  args.yardstick_clients, args.yardstick_seconds, 404)
        report["yardstick_django"] = await yardstick(base, "/admin/", {}, args.yardstick_clients,
                                                     args.yardstick_seconds, 302)
    finally:
        stop_sampler.set()
        await sampler
    report["peak"] = dict(peak)
    report["load_end"] = os.getloadavg()[0]
    return report


async def snapshot(pid: int, directory: Path) -> str:
    """Have the server (under TRACEMALLOC_WRAPPER) dump a tracemalloc snapshot; its path."""
    before = set(directory.glob("snap-*.tm"))
    os.kill(pid, signal.SIGUSR1)
    found: list[Path] = []

    def written() -> bool:
        found[:] = sorted(set(directory.glob("snap-*.tm")) - before)
        return bool(found)

    if not await until(written, 120, 0.2):
        raise RuntimeError("the server wrote no tracemalloc snapshot within 120 s")
    return str(found[0])


# ---------------------------------------------------------------------------------------- report


def print_tracemalloc(report: dict[str, Any], top: int = 20) -> None:
    """Where the parked calls' memory went: the snapshot difference (parked - before), each
    allocation charged to the innermost frame that is not plumbing (PLUMBING, the standard
    library), summed by package or module and by line; and the event loop's tasks per call."""
    import tracemalloc

    if "snapshot_before" not in report or "snapshot_parked" not in report:
        return
    n = max(1, report["parked_at_sample"])
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before = tracemalloc.Snapshot.load(report["snapshot_before"]).filter_traces(ignore)
    parked = tracemalloc.Snapshot.load(report["snapshot_parked"]).filter_traces(ignore)
    by_owner: dict[str, float] = {}
    by_line: dict[str, float] = {}
    for stat in parked.compare_to(before, "traceback"):
        frames = [(module_of(frame.filename), frame) for frame in stat.traceback]
        owner, frame = next(((m, f) for m, f in reversed(frames) if m is not None), (None, stat.traceback[-1]))
        owner = owner or "(standard library only)"
        by_owner[owner] = by_owner.get(owner, 0.0) + stat.size_diff
        line = f"{short(frame.filename)}:{frame.lineno}"
        by_line[line] = by_line.get(line, 0.0) + stat.size_diff
    total = sum(by_owner.values())
    say(f"tracemalloc, {report['variant']}: {total / 1024 / n:.1f} kB per parked call allocated by Python and still "
        "alive once parked (traced from the 'before' sample on; a traced run's RSS and timings are not comparable)")
    say("  by package / module (kB per call; each allocation charged to its innermost frame outside the standard "
        f"library and {', '.join(PLUMBING)}):")
    for owner, size in sorted(by_owner.items(), key=lambda item: -item[1])[:top]:
        say(f"    {size / 1024 / n:7.2f} kB  {owner}")
    say(f"  top {top} lines (same charging):")
    for line, size in sorted(by_line.items(), key=lambda item: -item[1])[:top]:
        say(f"    {size / 1024 / n:7.2f} kB  {line}")
    tasks = [json.loads(Path(report[key][: -len(".tm")] + ".tasks.json").read_text())
             for key in ("snapshot_before", "snapshot_parked")]
    added = {name: tasks[1].get(name, 0) - tasks[0].get(name, 0) for name in set(tasks[0]) | set(tasks[1])}
    say(f"  event-loop tasks: {sum(tasks[0].values())} before, {sum(tasks[1].values())} parked = "
        f"{(sum(tasks[1].values()) - sum(tasks[0].values())) / n:.1f} per parked call:")
    for name, count in sorted(added.items(), key=lambda item: -item[1]):
        if count / n >= 0.5:
            say(f"    {count / n:5.1f}  {name}")


def module_of(filename: str) -> str | None:
    """The package (or, for mcp, askcards and sse_starlette, the module) a frame belongs to; None
    for the standard library and PLUMBING."""
    if "site-packages/" in filename:
        parts = filename.split("site-packages/", 1)[1].removesuffix(".py").split("/")
        if parts[0] in PLUMBING or parts[0].endswith(".dist-info"):
            return None
        return ".".join(parts) if parts[0] in ("mcp", "sse_starlette") else parts[0]
    if filename.startswith(str(PROJECT_DIR) + "/"):
        return ".".join(filename[len(str(PROJECT_DIR)) + 1:].removesuffix(".py").split("/"))
    return None  # the standard library, <frozen …>, <string>


def short(filename: str) -> str:
    for marker in ("site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.replace(str(PROJECT_DIR) + "/", "")


def per_call_kb(report: dict[str, Any]) -> float:
    return (report["rss_parked_kb"] - report["rss_before_kb"]) / max(1, report["parked_at_sample"])


def print_variant(args: argparse.Namespace, report: dict[str, Any]) -> None:
    variant = report["variant"]
    lat = report["latencies_ms"]
    n = report["calls"]
    title = VARIANTS[variant]
    say()
    say(f"--- {title}")
    say(f"load average {report['load_start']:.1f} -> {report['load_end']:.1f}; "
        f"{report['shown']}/{n} asks shown on the panel {report['created_seconds']:.1f} s after the first call "
        f"({args.create_concurrency} unshown in flight); {report['returned_early']} returned before any answer")
    say(f"parking: server CPU {report['cpu_park_phase']:.1f} s until every ask was shown "
        f"({cpu_ms(report, 'cpu_park_phase'):.1f} ms per call: request, ask creation, panel message, parking)")
    say(f"answers: {n} sent over the panel socket in {report['answer_seconds']:.1f} s "
        f"(max schedule slip {report['send_slip_ms']:.0f} ms); server CPU during answers+wakes "
        f"{report['cpu_answer_phase']:.1f} s ({report['cpu_answer_phase'] / max(1, n) * 1000:.1f} ms per call)")
    say(f"answer-to-wake latency (ms): p50 {percentile(lat, 50):.1f}   p99 {percentile(lat, 99):.1f}   "
        f"max {lat[-1] if lat else float('nan'):.1f}   (n={len(lat)}; min {lat[0] if lat else float('nan'):.1f}, "
        f"p90 {percentile(lat, 90):.1f})")
    lost_total = n - len(lat)
    say(f"lost or wrong calls: {lost_total}" + (f"  {report['lost']}" if report["lost"] else "")
        + f"; acks ok {report['acks_ok']}/{n}")
    for example in report["lost_examples"]:
        say(f"    e.g. {example}")
    say(f"server RSS: idle after start {mb(report['rss_idle_kb']):.0f} MB, after the warm-up "
        f"{mb(report['rss_before_kb']):.0f} MB, with {report['parked_at_sample']} calls parked "
        f"{mb(report['rss_parked_kb']):.0f} MB "
        f"-> {per_call_kb(report):.1f} kB per parked call; threads {report['threads_before']} -> "
        f"{report['threads_parked']} (max seen {report['peak'].get('threads', 0)}); "
        f"peak (VmHWM) {mb(report['hwm_after_calls_kb']):.0f} MB")
    if report.get("panel_unknown"):
        say(f"panel: unexpected messages e.g. {report['panel_unknown']}")
    for name, label in (("yardstick_drf", f"GET /api/v1/asks/{MISSING_ASK[:6]}… (DRF, Bearer auth, 404)"),
                        ("yardstick_django", "GET /admin/ (plain Django view, 302 to login)")):
        y = report[name]
        extra = f"  unexpected {y['unexpected']}" if y["unexpected"] else ""
        say(f"YARDSTICK {label}: {y['rps']:.0f} req/s, p50 {y['p50']:.1f} ms, p99 {y['p99']:.1f} ms "
            f"({args.yardstick_clients} keep-alive clients, {args.yardstick_seconds:.0f} s){extra}")
    if args.tracemalloc:
        print_tracemalloc(report)


def print_report(args: argparse.Namespace, reports: dict[str, dict[str, Any]], nofile: tuple[int, int]) -> None:
    say()
    say("=== askcards MCP benchmark (embedded default: SQLite + in-process wakes, one serve process per variant) ===")
    say(f"calls {args.calls} per variant, answer rate {args.rate}/s, warm-up {args.warmup}, ask timeout "
        f"{args.ask_timeout} s, open-file limit {nofile[0]}, cores {os.cpu_count()} "
        "(other processes on this machine skew every figure)")
    for variant in args.variants:
        print_variant(args, reports[variant])
    if "rest" not in reports:
        return
    rest = reports["rest"]
    for variant in (v for v in args.variants if v in MCP_VARIANTS):
        mcp = reports[variant]
        say()
        verdicts = []
        for name, m, r, target in ratio_rows(mcp, rest):
            ratio = m / r if r > 0 else float("inf")
            say(f"{variant} / rest {name}: {m:.1f} / {r:.1f} = {ratio:.2f}x")
            if target:
                verdicts.append(f"{name} {ratio:.2f}x [{'ok' if ratio <= TARGET_RATIO else 'MISSED'}]")
        lost = sum(reports[v]["calls"] - len(reports[v]["latencies_ms"]) for v in ("rest", variant))
        say(f"target (printed, not asserted): {variant} within {TARGET_RATIO}x of rest on wake p99 and memory "
            f"per parked call: {', '.join(verdicts)}; 0 lost [{'ok' if not lost else 'MISSED'}]")


def ratio_rows(mcp: dict[str, Any], rest: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(figure, MCP's, REST's, whether MCP / REST has a target) for one MCP variant."""
    return [
        ("wake p50 ms", percentile(mcp["latencies_ms"], 50), percentile(rest["latencies_ms"], 50), False),
        ("wake p99 ms", percentile(mcp["latencies_ms"], 99), percentile(rest["latencies_ms"], 99), True),
        ("kB per parked call", per_call_kb(mcp), per_call_kb(rest), True),
        ("server CPU ms per call, parking", cpu_ms(mcp, "cpu_park_phase"), cpu_ms(rest, "cpu_park_phase"), False),
        ("server CPU ms per call, answers + wakes", cpu_ms(mcp, "cpu_answer_phase"),
         cpu_ms(rest, "cpu_answer_phase"), False),
    ]


def figures(args: argparse.Namespace, reports: dict[str, dict[str, Any]]) -> list[Figure]:
    """What one round printed, for the summary over the rounds."""
    found: list[Figure] = []
    for variant in args.variants:
        report = reports[variant]
        lat = report["latencies_ms"]
        found += [
            Figure(f"{variant}: wake p50", percentile(lat, 50), "ms"),
            Figure(f"{variant}: wake p99", percentile(lat, 99), "ms"),
            Figure(f"{variant}: wake max", lat[-1] if lat else float("nan"), "ms"),
            Figure(f"{variant}: lost or wrong calls", report["calls"] - len(lat), "", exactly(0)),
            Figure(f"{variant}: kB per parked call", per_call_kb(report), "kB"),
            Figure(f"{variant}: server CPU per call, parking", cpu_ms(report, "cpu_park_phase"), "ms"),
            Figure(f"{variant}: server CPU per call, answers + wakes", cpu_ms(report, "cpu_answer_phase"), "ms"),
            Figure(f"{variant}: peak server memory (VmHWM)", mb(report["hwm_after_calls_kb"]), "MB"),
            Figure(f"{variant}: YARDSTICK DRF view", report["yardstick_drf"]["rps"], "req/s"),
            Figure(f"{variant}: YARDSTICK GET /admin/", report["yardstick_django"]["rps"], "req/s"),
        ]
    if "rest" in reports:
        for variant in (v for v in args.variants if v in MCP_VARIANTS):
            for name, m, r, target in ratio_rows(reports[variant], reports["rest"]):
                found.append(Figure(f"{variant} / rest: {name.replace(' ms', '')}", m / r if r > 0 else float("inf"),
                                    "x", at_most(TARGET_RATIO) if target else None))
    return found


def cpu_ms(report: dict[str, Any], key: str) -> float:
    return report[key] / max(1, report["calls"]) * 1000


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=None,
                        help="parked calls per variant, default 1000 (100 with --quick)")
    parser.add_argument("--rate", type=float, default=50.0,
                        help="answers per second, default 50 (what this 2-core machine wakes without queueing)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 100 calls, 5 warm-up calls, 3 s yardsticks")
    parser.add_argument("--variants", default="rest,mcp,mcp2026",
                        help="which to run, in this order (default rest,mcp,mcp2026; mcp = the 2025-11-25 wire, "
                             "mcp2026 = the 2026-07-28 one)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up calls per variant, default 20 (5 with --quick)")
    parser.add_argument("--ask-timeout", type=int, default=600, help="the asks' timeout_seconds, default 600")
    parser.add_argument("--create-concurrency", type=int, default=20,
                        help="calls in flight whose ask is not shown yet, default 20")
    parser.add_argument("--port", type=int, default=0, help="server port on 127.0.0.1; 0 picks a free one")
    parser.add_argument("--yardstick-clients", type=int, default=20)
    parser.add_argument("--yardstick-seconds", type=float, default=None, help="default 10 (3 with --quick)")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="py-spy record the server per phase into PREFIX-<variant>-<park|answer>.txt")
    parser.add_argument("--profile-gil", action="store_true", help="with --profile: sample only the GIL holder")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="run the servers under tracemalloc (FRAMES deep) and print where the parked calls' "
                             "memory was allocated (slow; its RSS figures are not comparable)")
    parser.add_argument("--keep", action="store_true", help="keep the temp data dir and server log (debugging)")
    add_rounds_argument(parser)
    args = parser.parse_args(argv)
    check_rounds(parser, args.repeat)
    quick = args.quick
    args.calls = args.calls if args.calls is not None else (100 if quick else 1000)
    args.warmup = args.warmup if args.warmup is not None else (5 if quick else 20)
    args.yardstick_seconds = args.yardstick_seconds if args.yardstick_seconds is not None else (3.0 if quick else 10.0)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not 1 <= args.calls <= 20000 or args.rate <= 0 or args.warmup < 0 or not args.variants \
            or any(v not in VARIANTS for v in args.variants) or len(set(args.variants)) != len(args.variants):
        parser.error("--calls 1..20000, --rate > 0, --warmup >= 0, --variants from rest,mcp,mcp2026")
    if "rest" in args.variants and args.calls / args.rate > REST_WAIT - 15:
        say(f"warning: answering {args.calls} calls at {args.rate}/s may outlast the REST wait ({REST_WAIT} s) "
            "of the first ones")

    nofile = raise_nofile_limit()  # before the servers start: they inherit the limit
    needed = args.calls + args.warmup + 200
    if nofile[0] < needed:
        say(f"warning: open-file limit {nofile[0]} < {needed}; sockets may run out")
    run_rounds("askcards MCP benchmark", args.repeat, lambda _: figures(args, one_round(args, nofile)),
               note=f"{args.calls} calls per variant at {args.rate:g} answers/s; target: each MCP wire within "
                    f"{TARGET_RATIO}x of REST on wake p99 and memory per parked call, 0 lost")
    return 0


def server_command(args: argparse.Namespace, port: int, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``manage.py serve`` on ``port`` and its environment; with ``--tracemalloc``, under TRACEMALLOC_WRAPPER."""
    if args.tracemalloc:
        traced = {"BENCH_TRACEMALLOC_FRAMES": str(args.tracemalloc), "BENCH_SNAPSHOT_DIR": str(args.snapshot_dir)}
        return [PYTHON, "-c", TRACEMALLOC_WRAPPER, "serve", f"{HOST}:{port}"], {**env, **traced}
    return serve_command(port), env


def one_round(args: argparse.Namespace, nofile: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """Every variant on a fresh data dir and server, the report printed; the reports by variant."""
    root = Path(tempfile.mkdtemp(prefix="askcards-bench-mcp-"))
    reports: dict[str, dict[str, Any]] = {}
    procs: Processes | None = None
    try:
        for variant in args.variants:
            # A data dir (database) of its own per variant: every variant starts from the same state.
            data_dir = root / variant
            data_dir.mkdir()
            env = bench_env(data_dir, panel_page=True)
            procs = Processes(data_dir)
            args.snapshot_dir = data_dir
            say(f"{variant}: setup in {data_dir}")
            run_manage(env, "migrate", "--no-input", "-v", "0")
            fixture = seed_fixture(env, [USERNAME], password=PASSWORD)
            port = args.port or free_port()
            base = f"http://{HOST}:{port}"
            server = procs.start("server", *server_command(args, port, env))
            try:
                say(f"{variant}: server pid {server.pid} on {base}")
                reports[variant] = asyncio.run(asyncio.wait_for(
                    run_variant(variant, args, base, port, procs, server.pid, fixture),
                    (300 + args.calls / 5 + args.calls / args.rate) * (5 if args.tracemalloc else 1),
                ))
            finally:
                procs.stop_all()
        print_report(args, reports, nofile)
        return reports
    except BaseException:
        tail = procs.tail("server", 4000) if procs is not None else ""
        if tail.strip():
            say(f"--- server log tail ---\n{tail}\n---")
        raise
    finally:
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
