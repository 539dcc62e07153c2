"""A real ``manage.py serve`` process on 127.0.0.1 for end-to-end tests, on its own SQLite file."""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import requests

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30  # seconds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_connection(base: str) -> socket.socket:
    """A plain TCP connection to a served ``base`` URL, for requests no HTTP client would send."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.settimeout(10)
    return sock


def read_head(sock: socket.socket, seconds: float = 10) -> bytes:
    """What the server answers on a raw connection, up to the end of its headers (or its close)."""
    sock.settimeout(seconds)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            break
        data += piece
    return data


def service_env(data_dir: Path) -> dict[str, str]:
    """The embedded default (SQLite in ``data_dir``, in-memory layer), whatever this shell has set."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(ASKCARDS_DATA_DIR=str(data_dir), ASKCARDS_SECRET_KEY="serve-test", PYTHONUNBUFFERED="1")
    return env


# A migrated embedded database per test process, copied into each new data dir that ``manage``
# is asked to migrate (a migration run costs about 2.5 s of CPU; dozens of tests start a server).
_template: Path | None = None


def _migrate_from_template(env: dict[str, str]) -> bool:
    """Put a copy of this process's migrated template database in ``env``'s data dir, when it is
    the embedded default and the dir has no database yet; False when that does not apply."""
    global _template
    if env.get("DATABASE_URL") or not env.get("ASKCARDS_DATA_DIR"):
        return False
    target = Path(env["ASKCARDS_DATA_DIR"]) / "askcards.sqlite3"
    if target.exists():
        return False  # migrating an existing database: run the migrations for real
    if _template is None:
        template_dir = Path(tempfile.mkdtemp(prefix="askcards-template-"))
        atexit.register(shutil.rmtree, template_dir, True)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True, timeout=180,
                       env={**env, "ASKCARDS_DATA_DIR": str(template_dir)}, capture_output=True, text=True)
        _template = template_dir / "askcards.sqlite3"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(_template, target)  # keeps its 0600
    return True


def manage(env: dict[str, str], *args: str, timeout: int = 120) -> str:
    if args and args[0] == "migrate" and set(args[1:]) <= {"-v0", "--no-input"} and _migrate_from_template(env):
        return ""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, timeout=timeout, capture_output=True, text=True
    )
    return done.stdout


def shell_json(env: dict[str, str], code: str) -> dict:
    """Run ``code`` in ``manage.py shell``; its last printed line is JSON."""
    return json.loads(manage(env, "shell", "-c", code, timeout=60).strip().splitlines()[-1])


@contextlib.contextmanager
def serve(env: dict[str, str], *options: str, log_dir: Path | None = None) -> Iterator[str]:
    """``manage.py serve`` on a free port; yields its base URL once it answers, stops it after.

    Its output goes to ``serve.log`` in ``log_dir`` (default: the data dir), never to an unread
    pipe that could fill up and stall the server; a start failure shows the log.
    """
    with serve_process(env, *options, log_dir=log_dir) as (base, _):
        yield base


def _open_files_limit(limit: int):
    def lower() -> None:  # runs in the child, before manage.py
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


@contextlib.contextmanager
def serve_process(env: dict[str, str], *options: str, log_dir: Path | None = None,
                  open_files: int | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """``serve`` that also yields the server's process (to stall it with SIGSTOP, say);
    ``open_files`` lowers its RLIMIT_NOFILE (soft and hard) to that many descriptors."""
    port = free_port()
    log_path = Path(log_dir or env["ASKCARDS_DATA_DIR"]) / "serve.log"
    with log_path.open("w+") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}", *options],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_open_files_limit(open_files) if open_files else None,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start within {START_TIMEOUT} s:\n{log_path.read_text()[-4000:]}")
                try:
                    requests.get(f"{base}/api/schema/", timeout=2)
                    break
                except requests.ConnectionError:
                    time.sleep(0.1)
            yield base, server
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGCONT)  # a test may leave it stopped
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)


@contextlib.contextmanager
def seeded(data_dir: Path, seed_code: str) -> Iterator[tuple[str, dict]]:
    """A migrated embedded-default service in ``data_dir``, seeded by ``seed_code`` (see
    ``shell_json``), served; yields (base URL, the seed's JSON)."""
    env = service_env(data_dir)
    manage(env, "migrate", "-v0")
    seed = shell_json(env, seed_code)
    with serve(env) as base:
        yield base, seed


def until(check, what: str, timeout: float = 20.0, every: float = 0.05):
    """``check()``'s first truthy value, polled every ``every`` s; AssertionError naming ``what``
    after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
