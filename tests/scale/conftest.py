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


@pytest.fixture(scope="module")
def redis_url(request):
    """The Redis database of the requesting module (its ``REDIS_DB``: the channel layer has no
    prefix setting, so a database number keeps modules apart). Checked before ``pg_db`` makes a
    database for nothing."""
    require_service("Redis", harness.REDIS_HOST, harness.REDIS_PORT)
    return f"redis://{harness.REDIS_HOST}:{harness.REDIS_PORT}/{request.module.REDIS_DB}"


@pytest.fixture(scope="module")
def redis_env(redis_url, pg_db):
    """``pg_db``'s environment with the module's Redis as channel layer and cache."""
    return {**pg_db.env, "REDIS_URL": redis_url}


@pytest.fixture(scope="session")
def lists_db(tmp_path_factory):
    """110,000 asks (tests.bench.seed: 100,000 closed with audit rows and outbox events, 10,000
    pending) over 1,000 sessions of 10 agents, for the tests of the lists at size (the admin's,
    the API's); seeded once for the session, dropped at its end."""
    from tests.largedb import seeded_database

    with seeded_database(tmp_path_factory.mktemp("askcards-data"), closed=100_000, pending=10_000,
                         sessions=1_000) as database:
        yield database
