"""A throwaway PostgreSQL database filled by ``tests.bench.seed``, for the tests of what stays
cheap at size (admin lists, pruning). Its processes run with the service's own settings
(``project.settings``, ``DATABASE_URL``), like tests/scale's; every wait is bounded."""
from __future__ import annotations

import contextlib
import json
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
    """Copy the migrated database ``template`` (``tests.scale.harness.create_database``) and seed
    it (``tests.bench.seed.Size(**size)``); dropped on exit."""
    import psycopg

    from tests.bench.seed import Size, seed
    from tests.scale import harness

    require_service("PostgreSQL", PG_HOST, PG_PORT)
    created = harness.create_database(data_dir, template=template)
    # Statements captured with their parameters inline, so EXPLAIN takes them as they are.
    database = SeededDatabase(created.name, {**created.env, "ASKCARDS_DB_PREPARE": "0"})
    try:
        with psycopg.connect(database.dsn, autocommit=True, connect_timeout=5) as conn:
            seed(conn, Size(**size))
            conn.execute("VACUUM ANALYZE")
        yield database
    finally:
        harness.drop_database(created.name)
