"""The schema is the contract: schemathesis, property-based from the OpenAPI document the app
serves at /api/schema/, runs every operation through the real ASGI application (in-process, no
network, on the test SQLite database) as a real agent, and finds nothing.

Every check schemathesis enables by default runs: no server error; every status, content type,
header and body is one the operation declares; a schema-valid request is accepted and a
schema-violating one is refused with a 4xx; a method a path does not list answers 405 with
``Allow``; a missing or wrong key is a 401. Its coverage phase (each constraint's boundaries and
each way to break it, the undeclared methods) and its fuzzing phase both run; the stateful phase
(chains of calls) does not.

- Deterministic: a fixed seed, derandomized generation, no example database; ``MAX_EXAMPLES``
  bounds the fuzzing of each operation.
- Resolvable paths: the agent has a present web session, a Feishu session (for progress) and a
  pending ask; a generated case whose path (or ``tools/call``'s body, ``GET /asks``' query) is
  schema-valid names those instead of ids that cannot exist, so the operation does its work.
  Cases that break the path keep it.
- Long-polls park for at most ``PARK_SECONDS``: the waiting itself is tests/test_longpoll.py's;
  here a ``wait=60`` must answer as the schema says, not take a minute.
- What the schema cannot know: a schema-valid ``POST /sessions`` may still be a 400 for the
  reasons its description lists (``UNKNOWABLE``); only those messages are let through.
"""
from __future__ import annotations

import pytest
import schemathesis
from django.db import connection
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

from askcards.api import longpoll
from project.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

SEED = 20260601
MAX_EXAMPLES = 60
PARK_SECONDS = 0.01

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            "database": "none",
            # A NUL anywhere in a body is refused by the JSON parser (400 malformed_json, declared):
            # generated text would otherwise make every text field's positive cases that 400.
            "allow-x00": False,
        },
        "phases": {
            "stateful": {"enabled": False},
            # Nothing learnt from responses (they hold fresh ids each run): the same cases every run.
            "coverage": {"extra-data-sources": {"responses": False}},
            "fuzzing": {"extra-data-sources": {"responses": False}, "error-feedback": {"enabled": False}},
        },
    }
)

# Loaded from the app itself, as a client would fetch it (Host: one ALLOWED_HOSTS names outside tests).
schema = schemathesis.openapi.from_asgi("/api/schema/", application, config=CONFIG, headers={"Host": "localhost"})

# POST /sessions: 400s for what a schema cannot know, as the operation's description says.
UNKNOWABLE = {
    "POST /api/v1/sessions": (
        "cannot infer the platform of session key",  # a new key without `platform`
        "is longer than",  # the user id a Feishu key names is too long for a user id
    ),
}


def positive_data_accepted(ctx, response, case):
    """schemathesis' positive_data_acceptance, but for the 400s listed in ``UNKNOWABLE``."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        message = response.json()["error"]["message"] if response.status_code == 400 else ""
        if any(reason in message for reason in UNKNOWABLE.get(case.operation.label, ())):
            return None
        raise


def _valid(case, location: ParameterLocation) -> bool:
    """The case's ``location`` (path, body…) was generated schema-valid."""
    component = case.meta.components.get(location) if case.meta is not None else None
    return component is not None and component.mode.is_positive


def pytest_generate_tests(metafunc):
    """Each operation's test as its own pytest item: schemathesis names an item by its operation
    only when the test is parametrized (under pytest 9, an unparametrized one is named by the
    function alone, so all would share one id, and pytest-xdist would run just one of them)."""
    metafunc.parametrize("world", ["agent"], indirect=True)


@pytest.fixture
def world(request, agent_and_key, pending_ask, feishu_session, monkeypatch):
    """What the requests are sent as and to (``request.param``: the caller, the agent)."""
    if connection.vendor != "sqlite":
        pytest.skip("runs on SQLite: the README's test command (the PostgreSQL pass repeats the API tests)")
    wait = longpoll.LongPollApp._wait

    async def short_wait(self, poll, receive, again):
        poll.timeout = min(poll.timeout, PARK_SECONDS)
        return await wait(self, poll, receive, again)

    monkeypatch.setattr(longpoll.LongPollApp, "_wait", short_wait)
    return {
        "key": agent_and_key[1],
        "session_id": pending_ask.session_id,
        "progress_session_id": feishu_session.id,
        "ask_id": pending_ask.id,
    }


@schema.parametrize()
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_every_operation_keeps_its_contract(case, world):
    if _valid(case, ParameterLocation.PATH):
        for name in case.path_parameters or {}:
            real = "progress_session_id" if case.path.endswith("/progress") else name
            case.path_parameters[name] = world[real]
    if case.path == "/api/v1/tools/call" and isinstance(case.body, dict) and _valid(case, ParameterLocation.BODY):
        case.body["session"] = world["session_id"]
    if case.path == "/api/v1/asks" and "session" in (case.query or {}) and _valid(case, ParameterLocation.QUERY):
        case.query["session"] = world["session_id"]
    case.call_and_validate(
        headers={"Authorization": f"Bearer {world['key']}"},
        excluded_checks=[positive_data_acceptance],
        additional_checks=[positive_data_accepted],
    )
