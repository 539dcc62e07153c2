"""Shared plumbing of the multi-process tests: a throwaway PostgreSQL database, the race actor
subprocess, and a webhook receiver on 127.0.0.1. Every wait here is bounded."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.serving import free_port

PROJECT_DIR = Path(__file__).resolve().parents[2]
PG_HOST, PG_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
ADMIN_DSN = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/test"
SUBPROCESS_TIMEOUT = 60  # seconds for any one actor/manage.py run
START_DELAY = 2.5  # seconds between launching racers and their common start instant


@dataclass
class PgDatabase:
    name: str
    url: str
    env: dict[str, str]
    port: int = PG_PORT

    def connect(self):
        import psycopg

        return psycopg.connect(f"postgresql://postgres@{PG_HOST}:{self.port}/{self.name}", connect_timeout=5)

    def query(self, sql: str, *params: Any) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()


def create_database(data_dir: Path, template: str | None = None) -> PgDatabase:
    """A new database: empty, or a copy of ``template`` (no one may be connected to it)."""
    import psycopg
    from psycopg import sql

    name = f"askcards_race_{secrets.token_hex(6)}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(statement)
    return create_env(name, f"postgres://postgres@{PG_HOST}:{PG_PORT}/{name}", data_dir)


def create_env(name: str, url: str, data_dir: Path) -> PgDatabase:
    """The database ``name`` at ``url`` and the environment of the processes that use it."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": url,
        "ASKCARDS_SECRET_KEY": "test",
        "ASKCARDS_DATA_DIR": str(data_dir),
        "LOG_LEVEL": "WARNING",
        "ASKCARDS_WEBHOOK_ALLOW_PRIVATE": "true",  # the webhook receivers listen on 127.0.0.1
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REDIS_URL", None)
    return PgDatabase(name, url, env)


def drop_database(name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def manage(db: PgDatabase, *args: str, timeout: float = SUBPROCESS_TIMEOUT) -> str:
    """Run ``manage.py`` against the database; returns stdout, fails loudly with stderr."""
    proc = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_DIR, env=db.env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"manage.py {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


def actor_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.scale.race_actor", *args]


def run_actor(db: PgDatabase, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run one race_actor invocation to completion; returns its JSON output."""
    proc = subprocess.run(
        actor_command(*args), cwd=PROJECT_DIR, env=env or db.env, capture_output=True, text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert proc.returncode == 0, f"race_actor {' '.join(args[:2])} failed ({proc.returncode}):\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_actors_together(db: PgDatabase, commands: list[list[str]], env: dict[str, str] | None = None) -> list[Any]:
    """Launch several race_actor processes that all start at one wall-clock instant; JSON of each."""
    start = f"{time.time() + START_DELAY:.6f}"
    procs = [
        subprocess.Popen(
            actor_command(*args[:1], "--start", start, *args[1:]),
            cwd=PROJECT_DIR, env=env or db.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for args in commands
    ]
    outputs = []
    try:
        for args, proc in zip(commands, procs):
            stdout, stderr = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
            assert proc.returncode == 0, f"race_actor {' '.join(args[:2])} failed ({proc.returncode}):\n{stderr}"
            outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return outputs


@dataclass
class ReceivedWebhook:
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    """A real HTTP server on 127.0.0.1 that records every POST and answers 200 (after ``delay`` s)."""

    delay: float = 0.0
    received: list[ReceivedWebhook] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server API)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                time.sleep(receiver.delay)
                with receiver.lock:
                    receiver.received.append(ReceivedWebhook({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=10)

    def snapshot(self) -> list[ReceivedWebhook]:
        with self.lock:
            return list(self.received)


# ------------------------------------------------------------------ private services (fault tests)

def _pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (initdb, pg_ctl), if any."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    return found[-1].parent if found else None


@dataclass
class PrivateCluster:
    """A PostgreSQL cluster of the test's own, on a free port, trust auth, that the test may stop
    and start again (a restart under load). Run as ``postgres`` when this process is root (initdb
    refuses root). ``remove()`` stops it and deletes its files."""

    root: Path
    port: int = field(default_factory=free_port)

    @staticmethod
    def binaries() -> Path | None:
        return _pg_bin()

    def _run(self, *command: str, timeout: float = 60) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        proc = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(command[:2])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def init(self) -> PrivateCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            import shutil

            shutil.chown(self.root, "postgres", "postgres")
        bin_dir = _pg_bin()
        self._run(str(bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", timeout=120)
        return self

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(str(_pg_bin() / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
                  "-o", options, "-w", "-t", "60", "start", timeout=90)

    def stop(self, mode: str = "fast") -> None:
        self._run(str(_pg_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", timeout=90)

    def remove(self) -> None:
        import shutil

        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except AssertionError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def database(self, data_dir: Path) -> PgDatabase:
        """A fresh database in this cluster, with the environment of processes that use it."""
        import psycopg

        name = f"askcards_fault_{secrets.token_hex(4)}"
        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        db = create_env(name, f"postgres://postgres@127.0.0.1:{self.port}/{name}", data_dir)
        db.port = self.port
        return db


@dataclass
class PrivateRedis:
    """A Redis server of the test's own (no persistence: a restart starts empty, as a crashed
    cache would), killed and started again on the same port by the test."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15) -> None:
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    assert self.proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
                    time.sleep(0.05)
        finally:
            client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
