"""A throwaway PostgreSQL database filled by ``tests.bench.seed``, for the tests of what stays
cheap at size (admin lists, pruning). Its processes run with the service's own settings
(``project.settings``, ``DATABASE_URL``), like tests/scale's; every wait is bounded."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import require_service

PG_HOST, PG_PORT = "127.0.0.1", 5432
SERVER = f"postgresql://postgres@{PG_HOST}:{PG_PORT}"
PROJECT_DIR = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # seconds for any one subprocess


@dataclass
class SeededDatabase:
    name: str
    env: dict[str, str]

    @property
    def dsn(self) -> str:
        return f"{SERVER}/{self.name}"

    def run(self, module: str, *args: str, env: dict[str, str] | None = None) -> Any:
        """Run ``python -m module`` against the database (``env``: settings to override); its last
        line of output, as JSON."""
        proc = subprocess.run([sys.executable, "-m", module, *args], cwd=PROJECT_DIR, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, f"{module} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        return json.loads(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def seeded_database(data_dir: Path, template: str, **size: int) -> Iterator[SeededDatabase]:
    """Copy the migrated database ``template`` and seed it (``tests.bench.seed.Size(**size)``);
    dropped on exit."""
    import psycopg
    from psycopg import sql

    from tests.bench.seed import Size, seed

    require_service("PostgreSQL", PG_HOST, PG_PORT)
    name = f"askcards_large_{secrets.token_hex(6)}"
    with psycopg.connect(f"{SERVER}/test", autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    env = {
        **os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "DATABASE_URL": f"{SERVER}/{name}",
        "ASKCARDS_SECRET_KEY": "test", "ASKCARDS_DATA_DIR": str(data_dir), "LOG_LEVEL": "WARNING",
        # Statements captured with their parameters inline, so EXPLAIN takes them as they are.
        "ASKCARDS_DB_PREPARE": "0",
    }
    env.pop("REDIS_URL", None)
    database = SeededDatabase(name, env)
    try:
        with psycopg.connect(database.dsn, autocommit=True, connect_timeout=5) as conn:
            seed(conn, Size(**size))
            conn.execute("VACUUM ANALYZE")
        yield database
    finally:
        with psycopg.connect(f"{SERVER}/test", autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
