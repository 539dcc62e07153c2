"""Fixtures of the multi-process tests: each module gets its own freshly migrated PostgreSQL
database (dropped at teardown), so processes under test share nothing with pytest's own DB."""
from __future__ import annotations

import pytest

from tests.conftest import require_service
from tests.scale import harness


@pytest.fixture(scope="module")
def pg_db(tmp_path_factory):
    require_service("PostgreSQL", harness.PG_HOST, harness.PG_PORT)
    db = harness.create_database(tmp_path_factory.mktemp("askcards-data"))
    try:
        harness.manage(db, "migrate", "--no-input", "-v", "0", timeout=180)
        yield db
    finally:
        harness.drop_database(db.name)
