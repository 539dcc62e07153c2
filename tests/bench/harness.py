"""What more than one benchmark in tests/bench uses, besides the report (tests/bench/common.py:
the rounds, the machine line, the figures and their summary).

- Processes: the paths, a free port, ``manage.py`` and ``python -c`` steps with a time limit, the
  environment of a benchmark's servers (``bench_env``), the processes a benchmark starts
  (``Processes``: a ``manage.py serve`` or any command, with its log file; each stopped with
  SIGTERM, then killed), waiting until a server answers, the open-file limit.
- Readers of /proc: a process's memory, threads and CPU, this process's own CPU, the CPU of a
  PostgreSQL database's backends; the memory sampler, waiting until processes go quiet, and
  ``py-spy`` per phase (``Profiler``).
- The fixture seeder: web users with their login sessions and an agent with its key, its quotas
  lifted (``seed_fixture``); Feishu sessions with live progress cards and pending asks
  (``seed_cards``). The bulk PostgreSQL seeder is ``tests.bench.seed``.
- The client loops: a panel socket, answers over panel sockets at a steady rate, the capacity
  search, the yardstick (keep-alive clients on a tiny view for a fixed time), ``until``.
- MCP: a blocking ``tools/call`` on the 2025-11-25 or 2026-07-28 wire, parked until its ask is
  shown (``park``), and the check of its result (``check``).
- Feishu callbacks: a signed and encrypted submit and the check of its response.

Nothing here prints a figure; each benchmark prints its own.
"""
from __future__ import annotations

import asyncio
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from askcards.surfaces.feishu import security
from tests.bench.common import PROJECT_DIR, percentile, say
from tests.serving import free_port as free_port  # the benchmarks take it from here

PYTHON = sys.executable
HOST = "127.0.0.1"
SETUP_TIMEOUT = 120  # seconds for any one manage.py step or setup script
SEED_TIMEOUT = 300  # seconds for seed_cards' process
START_TIMEOUT = 60  # seconds for a server to answer
STOP_TIMEOUT = 15  # seconds a process has after SIGTERM before it is killed
MISSING_ASK = "q_00000000000000000000000000000000"
PG_SERVER = "postgres://postgres@127.0.0.1:5432"
CAPACITY_P99_MS = 100.0  # the wake p99 a sustained answer rate must keep (search_capacity)


# ------------------------------------------------------------------------------------- processes


def raise_nofile_limit() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard_target = 1 << 20
    else:
        hard_target = hard
    if soft < hard_target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard_target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def bench_env(data_dir: Path | str, *, settings: str = "project.settings", panel_page: bool = False,
              **extra: str) -> dict[str, str]:
    """The environment of a benchmark's servers and ``manage.py`` steps: this process's without
    ``DATABASE_URL`` and ``REDIS_URL`` (the embedded default: SQLite and in-process wakes, unless
    ``extra`` names them), ``DEBUG`` and ``ALLOWED_HOSTS``; its own data dir and secret key, the
    settings module ``settings``, logs from WARNING on, then ``extra``. ``panel_page``: one panel
    is sent every pending ask."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "ALLOWED_HOSTS"}}
    env.update({
        "ASKCARDS_DATA_DIR": str(data_dir),
        "ASKCARDS_SECRET_KEY": "bench",
        # One load generator on 127.0.0.1 stands for thousands of clients: no per-peer cap.
        "ASKCARDS_PEER_CONNECTIONS": "0",
        "DJANGO_SETTINGS_MODULE": settings,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    })
    if panel_page:
        # One panel stands for the people answering thousands of asks: it is sent every one of them.
        env["ASKCARDS_PANEL_PAGE"] = "10000"
    env.update(extra)
    return env


def run_manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def run_python(env: dict[str, str], code: str, *args: str, timeout: float = SETUP_TIMEOUT,
               what: str = "setup script") -> str:
    """``python -c code args…`` in the project directory; its output (RuntimeError, naming it
    ``what``, when it fails)."""
    proc = subprocess.run(
        [PYTHON, "-c", code, *args], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def last_json(output: str) -> Any:
    """The JSON a setup step printed as its last line."""
    return json.loads(output.strip().splitlines()[-1])


def serve_command(port: int, *options: str) -> list[str]:
    """``manage.py serve 127.0.0.1:<port>`` with ``options`` (``--no-migrate``, ``--no-worker``)."""
    return [PYTHON, "manage.py", "serve", f"{HOST}:{port}", *options]


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM, then kill after ``STOP_TIMEOUT`` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class Processes:
    """Every process the benchmark starts, each writing to ``<log_dir>/<name>.log`` (in a session
    of its own: it inherits the raised open-file limit, not the terminal's signals), stopped
    (``stop_server``) in reverse order."""

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
        for _, proc, log in reversed(self.started):
            stop_server(proc)
            if proc.stdout is not None:
                proc.stdout.close()
            log.close()
        self.started.clear()


def read_stub_port(stub: subprocess.Popen) -> int:
    """The Feishu stand-in (tests/bench/feishu_stub.py) prints ``listening <port>`` when ready;
    wait for that line (bounded)."""
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


async def wait_until_serving(base: str, alive: Callable[[], None], *, path: str = "/healthz",
                             headers: dict[str, str] | None = None, status: int | None = 200,
                             timeout: float = START_TIMEOUT) -> None:
    """Send ``GET base + path`` until it is answered with ``status`` (None: any), for at most
    ``timeout`` s; ``alive()`` (raising when a process it watches has exited) before each try."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while time.monotonic() < deadline:
            alive()
            try:
                async with http.get(f"{base}{path}", headers=headers) as resp:
                    await resp.read()
                    if status is None or resp.status == status:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"server {base} did not answer {path} within {timeout:.0f} s")


class Profiler:
    """Optional ``py-spy record`` of the server per phase (investigation only; py-spy is not a dependency)."""

    def __init__(self, prefix: str | None, pid: int, gil: bool = False):
        self.prefix, self.pid, self.gil, self.proc = prefix, pid, gil, None

    def start(self, phase: str) -> None:
        if not self.prefix:
            return
        self.stop()
        spy = shutil.which("py-spy") or str(Path(PYTHON).parent / "py-spy")
        out = f"{self.prefix}-{phase}.txt"
        self.proc = subprocess.Popen(
            [spy, "record", "--pid", str(self.pid), "--format", "raw", "--rate", "200", "--threads",
             "--nonblocking", *(["--gil"] if self.gil else []), "--output", out],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None


# ------------------------------------------------------------------------------------ PostgreSQL


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


# ---------------------------------------------------------------------------------------- /proc


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM in kB and the thread count of a process (empty when it is gone)."""
    wanted = {"VmRSS", "VmHWM", "Threads"}
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in wanted:
                    out[name] = int(value.split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return out


def proc_cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def own_cpu_seconds() -> float:
    """CPU this process (the load generator: every client connection) has used, user + system."""
    times = os.times()
    return times.user + times.system


def mb(kb: int | float) -> float:
    return kb / 1024


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


async def memory_sampler(pid: int, peak: dict[str, int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        status = proc_status(pid)
        if status:
            peak["rss"] = max(peak.get("rss", 0), status.get("VmRSS", 0))
            peak["hwm"] = max(peak.get("hwm", 0), status.get("VmHWM", 0))
            peak["threads"] = max(peak.get("threads", 0), status.get("Threads", 0))
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except asyncio.TimeoutError:
            pass


async def wait_quiet(pids: int | Sequence[int], timeout: float, window: float = 0.5, max_share: float = 0.05) -> float:
    """Wait until the process ``pids`` (or each of them) uses < max_share of one core over
    ``window``; returns seconds waited."""
    pids = [pids] if isinstance(pids, int) else list(pids)
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        before = [proc_cpu_seconds(pid) for pid in pids]
        await asyncio.sleep(window)
        if all((proc_cpu_seconds(pid) - b) / window < max_share for pid, b in zip(pids, before)):
            break
    return time.monotonic() - start


# ---------------------------------------------------------------------------------- the fixture


PASSWORD = "bench-password-1234"  # of the users seed_fixture makes with a password

# Web users and a logged-in session of each, written directly to the session store (``SessionStore``
# holding the user's id, backend and session-auth hash: exactly what ``django.contrib.auth.login``
# stores, without posting a login form), then the agent with its key, granted the users or not. The
# benchmarks measure askcards at sizes far past any one agent's default quotas (thousands of asks a
# minute, thousands of parked waits): their agent is given no limits, as an operator would
# (``askcards_agent quotas NAME --pending-asks 0 …``). seed_fixture runs it.
FIXTURE = r"""
import json, sys, django
django.setup()
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from askcards import services

params = json.loads(sys.argv[1])
User = get_user_model()
names = params["users"]
if params["password"] is None:
    users = []
    for name in names:
        user = User(username=name)
        user.set_unusable_password()  # no password hashing: thousands of users in one statement
        users.append(user)
    User.objects.bulk_create(users)
else:
    create = User.objects.create_superuser if params["superuser"] else User.objects.create_user
    for name in names:
        create(name, password=params["password"])
sessions = {}
for user in User.objects.filter(username__in=names):
    session = SessionStore()
    session[SESSION_KEY] = user._meta.pk.value_to_string(user)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    sessions[user.get_username()] = session.session_key
agent, key = services.agent_create(name=params["agent"], web_users=names if params["grant"] else [], actor="bench")
services.agent_quotas_set(agent=agent, actor="bench", **{quota: 0 for quota in services.QUOTAS})
print(json.dumps({"key": key, "cookie_name": settings.SESSION_COOKIE_NAME, "users": names,
                  "sessions": [sessions[name] for name in names]}))
"""


@dataclass
class Fixture:
    key: str  # the agent's API key
    cookie_name: str  # the session cookie's
    users: list[str]
    sessions: list[str]  # each user's login session (the cookie's value), in the order of users

    def cookie(self, user: int = 0) -> str:
        """The ``Cookie`` header of user number ``user``'s session."""
        return f"{self.cookie_name}={self.sessions[user]}"


def seed_fixture(env: dict[str, str], users: Sequence[str] = (), *, agent: str = "bench", grant: bool = True,
                 password: str | None = None, superuser: bool = False) -> Fixture:
    """In ``env``'s (migrated) database: the web users ``users``, each with a login session, and
    the agent ``agent`` (granted the users with ``grant``) with its quotas lifted. With
    ``password`` the users are made one by one with it (``create_user``, or ``create_superuser``
    with ``superuser``: the admin's pages); without, in one statement with no usable password."""
    params = {"users": list(users), "agent": agent, "grant": grant, "password": password, "superuser": superuser}
    return Fixture(**last_json(run_python(env, FIXTURE, json.dumps(params))))


# --------------------------------------------------------------------------------- client loops


async def until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(interval)
    return predicate()


async def settle_tasks(tasks, timeout: float) -> None:
    """Wait up to ``timeout`` s for ``tasks``; cancel (and reap) the ones still running."""
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


async def panel_socket(http: aiohttp.ClientSession, port: int, cookie: str) -> aiohttp.ClientWebSocketResponse:
    """A ``/ws/panel/`` socket on the server at ``port``, logged in with ``cookie`` (``Fixture.cookie``)."""
    return await http.ws_connect(
        f"ws://{HOST}:{port}/ws/panel/",
        headers={"Origin": f"http://{HOST}:{port}", "Cookie": cookie},
        heartbeat=None,
        autoping=True,
    )


async def web_session(http: aiohttp.ClientSession, base: str, auth: dict[str, str], key: str, web_user: str) -> None:
    """``POST /api/v1/sessions``: the session ``key``, on the web panel of ``web_user``."""
    async with http.post(f"{base}/api/v1/sessions", headers=auth,
                         json={"key": key, "platform": "web", "web_user": web_user}) as resp:
        body = await resp.text()
        if resp.status not in (200, 201):
            raise RuntimeError(f"session upsert failed: HTTP {resp.status} {body[:300]}")


async def answer_steadily(answers: Sequence[tuple[Any, str, Any]], rate: float) -> tuple[float, float]:
    """Send ``answers`` (``(panel socket, ask id, item)``; each item has ``question`` and
    ``label``), ``rate`` a second in the given order, each over its socket, stamping
    ``item.answer_sent``: the seconds it took and the worst lag behind the schedule, in ms."""
    start = time.monotonic() + 0.05
    slip = 0.0
    for index, (ws, ask_id, item) in enumerate(answers):
        target = start + index / rate
        delay = target - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        slip = max(slip, time.monotonic() - target)
        message = {
            "type": "ask_user_questions_result",
            "requestId": ask_id,
            "answers": [{"question": item.question, "selectedLabels": [item.label], "customInput": None}],
        }
        item.answer_sent = time.monotonic()
        await ws.send_str(json.dumps(message))
    return time.monotonic() - start, slip * 1000


async def search_capacity(measure, start: float, count: int) -> list[dict[str, Any]]:
    """The highest steady answer rate with wake p99 under 100 ms and nothing lost: ``await
    measure(rate)`` runs one step (a dict with ``rate``, ``asks``, ``p50``, ``p99``, ``lost`` and
    ``slip_ms``); the rate doubles from ``start`` until a step misses, then bisects between the last
    step that held and the first that missed (``count`` steps at most). Returns the steps, each
    with ``held``."""
    steps: list[dict[str, Any]] = []
    good, bad = 0.0, None
    rate = start
    for _ in range(count):
        step = await measure(rate)
        if step is None:  # nothing left to measure with
            break
        step["held"] = step["p99"] < CAPACITY_P99_MS and step["lost"] == 0 and step["slip_ms"] < CAPACITY_P99_MS
        steps.append(step)
        say(f"  capacity step: {rate:.0f} answers/s, {step['asks']} asks: wake p50 {step['p50']:.1f} ms, "
            f"p99 {step['p99']:.1f} ms, lost {step['lost']}, send slip {step['slip_ms']:.0f} ms "
            f"-> {'held' if step['held'] else 'missed'}")
        if step["held"]:
            good = rate
        else:
            bad = rate
        if bad is None:
            rate = rate * 2
        elif bad - good <= max(5.0, good * 0.1):
            break
        else:
            rate = (good + bad) / 2
    return steps


async def yardstick(base: str, path: str, headers: dict[str, str], clients: int, seconds: float,
                    expect: int, pid: int | None = None) -> dict[str, Any]:
    """``clients`` keep-alive clients on ``path`` for ``seconds``: req/s and latencies; with
    ``pid``, also that server's CPU per request (``cpu_ms``) over the same stretch."""
    latencies: list[float] = []
    cpu_before = proc_cpu_seconds(pid) if pid else 0.0
    unexpected: dict[str, int] = {}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        start = time.monotonic()
        deadline = start + seconds

        async def client() -> None:
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                try:
                    async with http.get(f"{base}{path}", headers=headers, allow_redirects=False) as resp:
                        await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    key = type(exc).__name__
                    unexpected[key] = unexpected.get(key, 0) + 1
                    await asyncio.sleep(0.05)
                    continue
                latencies.append(time.monotonic() - t0)
                if status != expect:
                    unexpected[f"HTTP {status}"] = unexpected.get(f"HTTP {status}", 0) + 1

        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(clients))), seconds + 35)
        elapsed = time.monotonic() - start
    cpu = proc_cpu_seconds(pid) - cpu_before if pid else float("nan")
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed if elapsed else 0.0,
        "p50": percentile(latencies, 50) * 1000,
        "p99": percentile(latencies, 99) * 1000,
        "cpu_ms": cpu / len(latencies) * 1000 if latencies else float("nan"),
        "unexpected": unexpected,
    }


# ------------------------------------------------------------------------------------------- MCP


LEGACY_VERSION = "2025-11-25"  # the initialize-handshake era: the SDK's stateless Streamable HTTP transport
MODERN_VERSION = "2026-07-28"  # the stateless revision: the SDK's single-exchange path
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
TIMEOUT_META = "io.askcards/timeout_seconds"
REST_WAIT = 60  # the REST long-poll's maximum
MCP_VARIANTS = ("mcp", "mcp2026")


@dataclass
class Call:
    index: int
    question: str
    label: str
    shown: asyncio.Event = field(default_factory=asyncio.Event)
    ask_id: str | None = None
    shown_at: float | None = None
    answer_sent: float | None = None
    ack: dict[str, Any] | None = None
    headers_sent: float | None = None
    arrived: float | None = None  # when the response carrying the result arrived
    status: int | None = None
    result: Any = None  # REST: the JSON body; MCP: the JSON-RPC message with the call's id
    error: str | None = None
    done: bool = False


def questions_for(call: Call) -> list[dict[str, Any]]:
    return [{
        "question": call.question,
        "header": "bench",
        "options": [{"label": "Alpha", "description": "first"}, {"label": "Beta"}],
    }]


async def mcp_call(http: aiohttp.ClientSession, base: str, key: str, query: str, call: Call,
                   ask_timeout: int, modern: bool) -> None:
    meta: dict[str, Any] = {TIMEOUT_META: ask_timeout}
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": LEGACY_VERSION,
    }
    if modern:  # the per-request envelope of the stateless revision, and its routing headers
        meta.update({PROTOCOL_VERSION_META: MODERN_VERSION, CLIENT_CAPABILITIES_META: {},
                     CLIENT_INFO_META: {"name": "bench_mcp", "version": "1"}})
        headers.update({"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": "tools/call",
                        "Mcp-Name": "ask_user_questions"})
    message = {
        "jsonrpc": "2.0",
        "id": call.index,
        "method": "tools/call",
        "params": {"name": "ask_user_questions", "arguments": {"questions": questions_for(call)}, "_meta": meta},
    }
    async with http.post(f"{base}/mcp?{query}", data=json.dumps(message), headers=headers,
                         trace_request_ctx={"call": call}) as resp:
        call.status = resp.status
        if "text/event-stream" not in resp.headers.get("Content-Type", ""):
            body = await resp.read()
            call.arrived = time.monotonic()
            try:
                call.result = json.loads(body)
            except ValueError:
                call.error = f"HTTP {resp.status} {resp.headers.get('Content-Type')}: {body[:200]!r}"
            return
        # SSE: events of "event:"/"data:" lines separated by a blank line; the message with the
        # call's id (a result or an error) is the answer, progress notifications would come before.
        data_lines: list[str] = []
        async for raw in resp.content:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" "))
                continue
            if line or not data_lines:
                continue
            try:
                event = json.loads("\n".join(data_lines))
            except ValueError:
                event = None
            data_lines = []
            if isinstance(event, dict) and event.get("id") == call.index and ("result" in event or "error" in event):
                call.arrived = time.monotonic()
                call.result = event
        if call.result is None:
            call.error = "the SSE stream ended without the call's result"


async def park(call: Call, request: Callable[[], Awaitable[None]], window: asyncio.Semaphore,
               shown_timeout: float) -> None:
    """Run ``request()`` (the call's blocking request) until it ends, recording a failure on the
    call. ``window``, acquired by the caller for this call, is released once the call's ask is
    shown, its request ended or ``shown_timeout`` s passed, whichever comes first: the calls in
    flight whose ask is not shown yet stay within the window."""
    task = asyncio.ensure_future(request())
    try:
        shown = asyncio.ensure_future(call.shown.wait())
        try:
            await asyncio.wait({task, shown}, timeout=shown_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            shown.cancel()
    finally:
        window.release()
    try:
        await task
    except Exception as exc:  # noqa: BLE001 - every failure is a lost call
        call.arrived = call.arrived or time.monotonic()
        call.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        call.done = True


def check(variant: str, call: Call) -> tuple[str, str] | None:
    """None when the call came back answered with its own ask and label; else (kind, detail).
    ``variant``: ``rest`` (``call.result`` the JSON body) or one of ``MCP_VARIANTS``."""
    if call.error or call.result is None:
        return "error/never returned", f"{call.index} {call.error}"
    if call.status != 200:
        return f"HTTP {call.status}", f"{call.index} {str(call.result)[:200]}"
    if variant in MCP_VARIANTS:
        if "error" in call.result:
            return "JSON-RPC error", f"{call.index} {call.result['error']}"
        result = call.result.get("result") or {}
        if result.get("isError"):
            return "isError", f"{call.index} {str(result.get('content'))[:200]}"
        data = result.get("structuredContent") or {}
    else:
        data = call.result
    ask = data.get("ask") or {}
    if ask.get("id") != call.ask_id:
        return "another ask", f"{call.index} expected {call.ask_id} got {ask.get('id')}"
    if data.get("status") != "answered":
        kind = f"status {data.get('status')}"
        if variant == "rest" and data.get("status") == "pending" and call.headers_sent and call.arrived:
            if call.arrived - call.headers_sent >= REST_WAIT - 1:
                kind += " (the 60 s wait ran out before its answer)"
        return kind, f"{call.index} reason {ask.get('reason')}"
    answers = (ask.get("result") or {}).get("answers") or [{}]
    if answers[0].get("selectedLabels") != [call.label]:
        return "wrong answer", f"{call.index} expected {[call.label]} got {answers[0].get('selectedLabels')}"
    if call.answer_sent is None or call.arrived is None:
        return "no timing", str(call.index)
    return None


# ------------------------------------------------------------------------------ Feishu callbacks


APP_ID = "cli_bench"
APP_SECRET = "bench-app-secret"
VERIFICATION_TOKEN = "vt-bench-token"
ENCRYPT_KEY = "ek-bench-encrypt-key"
TOAST_SUBMITTED = "已提交"

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


@dataclass
class PendingSubmit:
    ask_id: str
    session_id: str
    open_id: str
    message_id: str
    form: int  # n of the form on the card (ask_{n}, q{n}_{i}, submit_{n})


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


def seed_cards_here(agent: Any, bot: Any, cards: int, per_card: int, questions: list[dict[str, Any]],
                    label: str) -> tuple[list[list[Any]], list[str]]:
    """In this (Django) process, made by the services as the API would: ``cards`` Feishu p2p
    sessions of ``agent`` on ``bot``, ``feishu-<app>-private-ou_<label>_<n>``, each with a running
    progress card and ``per_card`` pending asks of ``questions``; then the cards count as sent and
    in sync (message id ``om_<label>_<pk>``): a run measures callbacks, not the first sends.
    Returns the asks as ``PendingSubmit`` fields, round-robin over the cards (so consecutive
    submits land on different cards), and the session keys."""
    from django.db import transaction
    from django.db.models import CharField, F, Value
    from django.db.models.functions import Cast, Concat

    from askcards import services
    from askcards.models import CardMessage

    chunk = 20
    prefix = f"feishu-{bot.app_id}-private-ou_{label}_"
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
                                             arguments={"questions": questions}, timeout_seconds=3600)
                    if out.status != "pending" or out.ask is None:
                        raise SystemExit(f"seed ask not pending: {out.status} {out.tool_result}")
                    asks.append(out.ask.id)
                by_card.append((session.id, session.user_id, asks))
                keys.append(key)
    cards_sent = CardMessage.objects.filter(bot=bot, progress_card__session__key__startswith=prefix)
    cards_sent.update(
        message_id=Concat(Value(f"om_{label}_"), Cast("id", CharField())), synced_version=F("version"),
        next_sync_at=None,
    )
    messages = dict(cards_sent.values_list("progress_card__session_id", "message_id"))
    order = []
    for position in range(per_card):  # round-robin over the cards
        for session_id, user_id, asks in by_card:
            order.append([asks[position], session_id, user_id, messages[session_id], position])
    return order, keys


# seed_cards_here in a process of its own (seed_cards runs it), the agent granted the bot. Prints
# one JSON line: the asks, the session keys, how many of their asks are pending, and the seconds
# it took.
SEED_CARDS = r"""
import json, sys, time, django
django.setup()
from askcards import services
from askcards.models import Agent, Ask, Bot
from tests.bench.harness import seed_cards_here

params = json.loads(sys.argv[1])
agent = Agent.objects.get(name=params["agent"])
bot = Bot.objects.get(platform="feishu", app_id=params["app_id"])
services.agent_bot_grant(agent=agent, bot=bot, actor="bench")
started = time.monotonic()
order, keys = seed_cards_here(agent, bot, params["cards"], params["per_card"], params["questions"], params["label"])
prefix = f"feishu-{bot.app_id}-private-ou_{params['label']}_"
pending = Ask.objects.filter(status=Ask.Status.PENDING, session__key__startswith=prefix).count()
print(json.dumps({"asks": order, "keys": keys, "pending": pending, "seconds": time.monotonic() - started}))
"""


def seed_cards(env: dict[str, str], cards: int, per_card: int, *, agent: str = "bench", label: str = "bench",
               timeout: float = SEED_TIMEOUT) -> dict[str, Any]:
    """Live Feishu cards with pending asks (``seed_cards_here``) in ``env``'s database, for the
    agent ``agent`` and the bot of APP_ID, in a process of its own: ``asks`` (``PendingSubmit``
    fields), ``keys``, ``pending`` and ``seconds``."""
    params = {"agent": agent, "app_id": APP_ID, "cards": cards, "per_card": per_card, "questions": QUESTIONS,
              "label": label}
    return last_json(run_python(env, SEED_CARDS, json.dumps(params), timeout=timeout, what="seeding"))
