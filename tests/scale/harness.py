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

PROJECT_DIR = Path(__file__).resolve().parents[2]
PG_HOST, PG_PORT = "127.0.0.1", 5432
ADMIN_DSN = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/test"
SUBPROCESS_TIMEOUT = 60  # seconds for any one actor/manage.py run
START_DELAY = 2.5  # seconds between launching racers and their common start instant


@dataclass
class PgDatabase:
    name: str
    url: str
    env: dict[str, str]

    def connect(self):
        import psycopg

        return psycopg.connect(f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{self.name}", connect_timeout=5)

    def query(self, sql: str, *params: Any) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()


def create_database(data_dir: Path) -> PgDatabase:
    import psycopg
    from psycopg import sql

    name = f"askcards_race_{secrets.token_hex(6)}"
    with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = f"postgres://postgres@{PG_HOST}:{PG_PORT}/{name}"
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
