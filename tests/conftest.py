from __future__ import annotations

import os
import socket

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from askcards.runtime import collector
from askcards import selectors, services
from askcards.models import Session
from tests.surfaces import RecordingSurface

# The suite's own process keeps CPython's full collections: tests look for objects with
# gc.get_objects(), which never lists frozen ones (the servers tests start pace theirs).
collector.PACE_SECONDS = 0

QUESTIONS = [
    {
        "question": "Which database should we use?",
        "header": "Database",
        "options": [
            {"label": "PostgreSQL", "description": "Relational"},
            {"label": "SQLite", "description": "Embedded"},
        ],
        "multiSelect": False,
    }
]


def service_available(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require(available: bool, missing: str) -> None:
    """Skip when something a test needs is missing, unless ASKCARDS_REQUIRE_SERVICES=1 (CI), then fail."""
    if available:
        return
    if os.environ.get("ASKCARDS_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{missing}, and ASKCARDS_REQUIRE_SERVICES=1 requires it")
    pytest.skip(f"{missing}; install or start it (or run .ci/run) to include these tests")


def require_service(name: str, host: str, port: int) -> None:
    require(service_available(host, port), f"{name} is not reachable at {host}:{port}")


@pytest.fixture(autouse=True)
def recording_surface(settings):
    settings.ASKCARDS_SURFACES = ["tests.surfaces.RecordingSurface"]
    RecordingSurface.reset()
    yield RecordingSurface
    RecordingSurface.reset()


@pytest.fixture(autouse=True)
def no_cached_bots():
    """The per-process bot cache must not carry a bot from one test's (rolled back) database into
    another's: rollbacks send no signals."""
    selectors.forget_active_bots()
    yield
    selectors.forget_active_bots()


@pytest.fixture
def flaky_cache(settings, monkeypatch):
    """Django's cache on a backend that can go down like a Redis server (set ``.down``), up at
    first, with a fresh record of token-cache outages so the log shows this test's alone, and no
    access token kept by this process yet. The cache is tried on every call, failed or not (the
    service waits a few seconds between tries once it failed: tests/feishu/test_client.py)."""
    from askcards.surfaces import http
    from tests.fakes.cache import FlakyCache

    settings.CACHES = {"default": {"BACKEND": "tests.fakes.cache.FlakyCache", "LOCATION": "askcards-flaky-cache"}}
    monkeypatch.setattr(http, "_outage", http._CacheOutage(retry_seconds=0))
    monkeypatch.setattr(http, "_local_tokens", http._LocalTokens())
    FlakyCache.down, FlakyCache.calls_refused = False, 0
    yield FlakyCache
    FlakyCache.down, FlakyCache.calls_refused = False, 0


def person(username: str, password: str | None = None):
    """The Django user ``username`` (made on first use; ``password`` sets its password)."""
    user, _ = get_user_model().objects.get_or_create(username=username)
    if password is not None:
        user.set_password(password)
        user.save(update_fields=["password"])
    return user


def grant(agent, *usernames: str) -> None:
    """Grant ``agent`` these web users, as an operator would (askcards_agent grant), making the users."""
    for username in usernames:
        person(username)
        services.agent_grant(agent=agent, username=username, actor="test")


def grant_bot(agent, bot) -> None:
    """Grant ``agent`` this bot, as an operator would (askcards_agent grant NAME --bot APP_ID)."""
    services.agent_bot_grant(agent=agent, bot=bot, actor="test")


@pytest.fixture
def agent_and_key(db):
    """agent-a and its key; it is granted the cast's web users, alice and bob."""
    agent, key = services.agent_create(name="agent-a")
    grant(agent, "alice", "bob")
    return agent, key


@pytest.fixture
def agent(agent_and_key):
    return agent_and_key[0]


@pytest.fixture
def other_agent(db):
    """agent-b, granted bob."""
    agent = services.agent_create(name="agent-b")[0]
    grant(agent, "bob")
    return agent


@pytest.fixture
def api(agent_and_key) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_and_key[1]}")
    return client


@pytest.fixture
def web_session(agent) -> Session:
    session, _ = services.session_upsert(agent=agent, key="web/alice", platform="web", web_user="alice", user_id="alice")
    return session


@pytest.fixture
def present_session(web_session, recording_surface) -> Session:
    recording_surface.present.add(web_session.id)
    return web_session


@pytest.fixture
def pending_ask(agent, present_session):
    outcome = services.tool_call(
        agent=agent, session=present_session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    )
    assert outcome.status == "pending"
    return outcome.ask


def answer_for(question: str = "Which database should we use?", labels=("PostgreSQL",), custom=None):
    return [{"question": question, "selectedLabels": list(labels), "customInput": custom}]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(tmp_path_factory, django_db_modify_db_settings_parallel_suffix):
    """Test on a SQLite file, like the service does: the in-memory shared-cache database fails
    concurrent writers at once ("table is locked") instead of queueing them behind the busy timeout,
    which the long-poll, panel and race tests exercise with real threads. Each xdist worker has its
    own file (its own temporary directory) and, on PostgreSQL, its own test database (pytest-django's
    ``_gw0``-style suffix, which this fixture keeps by depending on it)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


DATABASE_FIXTURES = ("db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
                     "live_server")


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only", action="store_true",
        help="run only the tests that use Django's test database (.ci/run's second pass, on PostgreSQL: the "
             "others would repeat the first pass exactly)",
    )


def uses_database(item) -> bool:
    return item.get_closest_marker("django_db") is not None or any(
        name in getattr(item, "fixturenames", ()) for name in DATABASE_FIXTURES)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject): two workers per core, at most 16. Half of the suite's wall time is
    spent waiting (on servers it started, host CLIs, timers of the lifecycle): with one worker per
    core a 2-core machine sat half idle (9.5 minutes, 48 % CPU); with two it runs in under 7."""
    return min(16, 2 * (os.cpu_count() or 1))


def pytest_itemcollected(item):
    """The test command runs on pytest-xdist with ``--dist loadgroup`` (pyproject). The multi-process
    tests in tests/scale each start several servers and workers against PostgreSQL and Redis: they
    run in one worker, one after another, so they never compete with each other for the machine
    (the other worker keeps running the rest of the suite).

    The tests of tables at size start no server: they read plans and counts of a seeded database,
    timing nothing. They form a group of their own ("large"), so the seeded database is made once
    and they need not wait behind the multi-process tests (one group was the whole run's length).

    Marked as each test is collected: xdist reads the groups into the test ids in its own
    ``pytest_collection_modifyitems``, which may run before any conftest's."""
    if item.nodeid.startswith(LARGE_DATA_TESTS):
        item.add_marker(pytest.mark.xdist_group("large"))
    elif item.nodeid.startswith("tests/scale/"):
        item.add_marker(pytest.mark.xdist_group("scale"))


def pytest_collection_modifyitems(config, items):
    """``--database-tests-only`` (the PostgreSQL pass of .ci/run): only the tests that use Django's
    test database.

    The groups go first: xdist hands out work in the order collected, and the multi-process group
    (minutes, one test after another) handed out last was the run's tail while the other worker
    sat idle."""
    if config.getoption("database_tests_only"):
        kept, deselected = [], []
        for item in items:
            (kept if uses_database(item) else deselected).append(item)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept
    items.sort(key=lambda item: 0 if item.get_closest_marker("xdist_group") else 1)


LARGE_DATA_TESTS = tuple(f"tests/scale/test_{name}.py" for name in (
    "admin_lists_at_size", "api_lists_at_size", "retention_at_size", "bench_seed"))
