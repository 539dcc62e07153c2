"""Fixtures of the multi-process tests: each module gets its own migrated PostgreSQL database (a
copy of one migrated once, dropped at teardown), so processes under test share nothing with
pytest's own DB."""
from __future__ import annotations

import pytest

from tests.conftest import require_service
from tests.scale import harness


@pytest.fixture(scope="session")
def pg_template(tmp_path_factory):
    """The name of a database migrated once per test process, which every module's database
    copies (``CREATE DATABASE … TEMPLATE``: under a second, where a migrate run takes 3 s on a
    quiet machine and 20–50 s on a loaded one). Nothing connects to it after the migration, as a
    copy requires."""
    require_service("PostgreSQL", harness.PG_HOST, harness.PG_PORT)
    template = harness.create_database(tmp_path_factory.mktemp("askcards-template"))
    try:
        harness.manage(template, "migrate", "--no-input", "-v", "0", timeout=180)
        yield template.name
    finally:
        harness.drop_database(template.name)


@pytest.fixture(scope="module")
def pg_db(tmp_path_factory, pg_template):
    db = harness.create_database(tmp_path_factory.mktemp("askcards-data"), template=pg_template)
    try:
        yield db
    finally:
        harness.drop_database(db.name)


@pytest.fixture(scope="module")
def redis_url(request):
    """The Redis database of the requesting module (its ``REDIS_DB``: the database number keeps
    modules apart, the cache's keys and the bus's channels, ``askcards:<db>:…``, alike). Checked before ``pg_db`` makes a
    database for nothing."""
    require_service("Redis", harness.REDIS_HOST, harness.REDIS_PORT)
    return f"redis://{harness.REDIS_HOST}:{harness.REDIS_PORT}/{request.module.REDIS_DB}"


@pytest.fixture(scope="module")
def redis_env(redis_url, pg_db):
    """``pg_db``'s environment with the module's Redis as bus and cache."""
    return {**pg_db.env, "REDIS_URL": redis_url}


@pytest.fixture(scope="session")
def lists_db(tmp_path_factory, pg_template):
    """110,000 asks (tests.bench.seed: 100,000 closed with audit rows and outbox events, 10,000
    pending) over 1,000 sessions of 10 agents, for the tests of the lists at size (the admin's,
    the API's); seeded once for the session, dropped at its end."""
    from tests.largedb import seeded_database

    with seeded_database(tmp_path_factory.mktemp("askcards-data"), pg_template, closed=100_000, pending=10_000,
                         sessions=1_000) as database:
        yield database
