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
   stub), the agent with its quotas lifted (``tests.bench.harness.seed_fixture``); then one seeding
   process (``harness.seed_cards``: ``services`` calls, as the API would make them): Feishu p2p
   sessions (``feishu-<app>-private-<open_id>``), each with a running progress card
   (``services.progress_put``) and ``--asks-per-card`` pending ``ask_user_questions`` asks
   (``services.tool_call``), enough for every submit of the run to answer a different ask. The
   cards are then marked as already sent (message id ``om_bench_<pk>``, synced version = version),
   standing for cards that are live on Feishu.
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
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.bench.common import (
    Figure, add_rounds_argument, analyze, at_least, at_most, below, check_rounds, exactly, percentile, run_rounds,
    say,
)
from tests.bench.harness import (
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    HOST,
    PG_SERVER,
    PYTHON,
    VERIFICATION_TOKEN,
    PendingSubmit,
    Processes,
    Profiler,
    bench_env,
    check_submit_response,
    free_port,
    own_cpu_seconds,
    pg_admin,
    pg_available,
    postgres_backends,
    postgres_cpu_between,
    proc_cpu_seconds,
    raise_nofile_limit,
    read_stub_port,
    run_manage,
    seed_cards,
    seed_fixture,
    serve_command,
    submit_request,
    wait_quiet,
    wait_until_serving,
)

AGENT = "bench"
PG_DATABASE = "askcards_bench"
TARGETS = ("sqlite", "postgres")
SHARE_TARGET = 0.50  # callback throughput over /healthz's, at least
CPU_TARGET = 3.0  # CPU per submit over a /healthz's, at most
P99_TARGET = 3.0  # callback p99 over /healthz's at the smallest client count, at most
P99_MS_TARGET = 1000.0  # far below Feishu's 3 s


# ------------------------------------------------------------------------------------------ state


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


# ---------------------------------------------------------------------------------------- phases


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
    await wait_until_serving(base, procs.alive)
    pids = [server.pid] + ([worker.pid] if worker else [])
    await wait_quiet(pids, 30)
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
                phase.drain_seconds = await wait_quiet(pids, 60)
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


def run_target(args: argparse.Namespace, target: str) -> TargetResult:
    result = TargetResult(target)
    if target == "postgres":
        why = pg_available()
        if why:
            result.skipped = why
            say(f"skipping postgres: {why}")
            return result
    data_dir = Path(tempfile.mkdtemp(prefix=f"askcards-bench-feishu-{target}-"))
    env = bench_env(data_dir, settings=args.settings)
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
        seed_fixture(env, agent=AGENT)
        total = args.asks or args.asks_per_level * len(args.clients)
        per_card = args.asks_per_card or total
        cards = -(-total // per_card)
        seeded = seed_cards(env, cards, per_card, agent=AGENT)
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
            server = procs.start("server", serve_command(port, "--no-migrate",
                                                         *(["--no-worker"] if args.no_worker else [])), env)
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
