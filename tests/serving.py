"""A real ``manage.py serve`` process on 127.0.0.1 for end-to-end tests, on its own SQLite file."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
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


def service_env(data_dir: Path) -> dict[str, str]:
    """The embedded default (SQLite in ``data_dir``, in-memory layer), whatever this shell has set."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(ASKCARDS_DATA_DIR=str(data_dir), ASKCARDS_SECRET_KEY="serve-test", PYTHONUNBUFFERED="1")
    return env


def manage(env: dict[str, str], *args: str, timeout: int = 120) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, timeout=timeout, capture_output=True, text=True
    )
    return done.stdout


def shell_json(env: dict[str, str], code: str) -> dict:
    """Run ``code`` in ``manage.py shell``; its last printed line is JSON."""
    return json.loads(manage(env, "shell", "-c", code, timeout=60).strip().splitlines()[-1])


@contextlib.contextmanager
def serve(env: dict[str, str]) -> Iterator[str]:
    """``manage.py serve`` on a free port; yields its base URL once it answers, stops it after."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                requests.get(f"{base}/api/schema/", timeout=2)
                break
            except requests.ConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve did not start: {server.stdout.read() if server.poll() is not None else 'timeout'}")
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
