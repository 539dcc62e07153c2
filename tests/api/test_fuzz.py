"""Property-based fuzzing of the agent API (SPEC §9: no input produces a 500).

Whatever arrives — arbitrary JSON, arbitrary bytes, arbitrary query strings and path segments,
near-valid tool arguments — the API answers below 500, every 4xx in the one error shape, and a
tool call that reaches the tool answers 200 with a tool result the model can read.

Hypothesis reuses the function-scoped database between examples (hence the suppressed health
check), so every assertion here holds whatever earlier examples did to the state.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askcards.api import serializers as s
from askcards.models import Ask, Session

from .conftest import (
    ASK_PATH_ENDPOINTS,
    BODY_ENDPOINTS,
    ENDPOINTS,
    GET_ENDPOINTS,
    SESSION_PATH_ENDPOINTS,
    error_of,
    fill,
    send,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Text a database can hold: NUL and lone surrogates are refused by the
# parser with a 400 before any tool runs (tests/security/test_text.py), not a tool-level failure.
STORABLE = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(STORABLE)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(STORABLE, max_size=12), children, max_size=5),
    max_leaves=25,
)

# Input serializer of each body endpoint (the recover endpoints take no fields).
BODY_FIELDS = {
    "session-upsert": s.SessionUpsertInput,
    "session-messages": s.MessageInput,
    "tool-call": s.ToolCallInput,
    "ask-cancel": s.CancelInput,
}
QUERY_FIELDS = {"ask-list": s.AskListQuery, "ask-wait": s.WaitQuery, "events": s.EventsQuery}


def assert_well_formed(response) -> None:
    """Below 500; a 4xx carries {"error": {"code", "message"}}; anything else is JSON."""
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        error_of(response)
    else:
        json.loads(response.content)


@pytest.fixture
def world(api, pending_ask, present_session):
    """The ids fuzzed requests may hit, so some of them reach the code behind validation."""
    return {
        "api": api,
        "ids": {"session_id": present_session.id, "ask_id": pending_ask.id},
        "session": present_session,
        "ask": pending_ask,
    }


# ------------------------------------------------------------------------------ bodies


@FUZZ
@given(endpoint=st.sampled_from(BODY_ENDPOINTS), body=json_values)
def test_fuzz_json_body_is_never_5xx(world, endpoint, body):
    method, route, _ = endpoint
    assert_well_formed(send(world["api"], method, fill(route, **world["ids"]), body))


raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    json_values.map(lambda value: json.dumps(value).encode()),
    # JSON-looking text cut at a random point, with escapes and special numbers mixed in.
    st.tuples(
        json_values.map(json.dumps),
        st.sampled_from(['"\\ud800"', '"\\u0000"', "NaN", "-Infinity", "1e999", "9" * 5000, "[" * 3000, '"\\x"']),
        st.integers(min_value=0, max_value=60),
    ).map(lambda parts: (parts[0][: parts[2]] + parts[1] + parts[0][parts[2] :]).encode()),
)


@FUZZ
@given(endpoint=st.sampled_from(BODY_ENDPOINTS), raw=raw_bodies)
def test_fuzz_raw_json_body_is_never_5xx(world, endpoint, raw):
    method, route, _ = endpoint
    assert_well_formed(send(world["api"], method, fill(route, **world["ids"]), raw=raw))


@st.composite
def field_shaped_bodies(draw, name: str, world_ids: dict):
    """Objects using the endpoint's real field names with plausible, edge and arbitrary values."""
    serializer = BODY_FIELDS.get(name)
    names = list(serializer().fields) if serializer else []
    plausible = st.one_of(
        st.sampled_from(
            [
                world_ids["session_id"],
                "web/alice",
                "ask_user_questions",
                "web",
                "feishu",
                "wechat",
                "dingtalk",
                "p2p",
                "group",
                "by_agent",
                "pause_failed",
                "alice",
                "",
                " ",
                0,
                1,
                60,
                61,
                -1,
                10**20,
                True,
                None,
            ]
        ),
        json_values,
    )
    keys = st.sampled_from(names) | st.text(max_size=8) if names else st.text(max_size=8)
    body = draw(st.dictionaries(keys, plausible, max_size=6))
    if name == "tool-call" and draw(st.booleans()):
        body.setdefault("session", world_ids["session_id"])
        body.setdefault("name", "ask_user_questions")
        body.setdefault("arguments", draw(json_values))
    return body


@FUZZ
@given(data=st.data())
def test_fuzz_field_shaped_body_is_never_5xx(world, data):
    method, route, name = data.draw(st.sampled_from(BODY_ENDPOINTS))
    body = data.draw(field_shaped_bodies(name, world["ids"]))
    assert_well_formed(send(world["api"], method, fill(route, **world["ids"]), body))


# ------------------------------------------------------------------------------ query strings and paths


@st.composite
def queries(draw, name: str):
    serializer = QUERY_FIELDS.get(name)
    names = list(serializer().fields) if serializer else []
    keys = st.sampled_from(names + ["format"]) | st.text(min_size=1, max_size=8)
    values = st.one_of(
        st.text(max_size=20),
        st.integers(min_value=-(10**25), max_value=10**25).map(str),
        st.sampled_from(["", "0", "60", "61", "pending", "answered", "web/alice", "json", "api", "1.0", " 5"]),
    )
    return draw(st.dictionaries(keys, values, max_size=5))


@FUZZ
@given(data=st.data())
def test_fuzz_query_params_are_never_5xx(world, data):
    method, route, name = data.draw(st.sampled_from(GET_ENDPOINTS))
    query = data.draw(queries(name))
    assert_well_formed(send(world["api"], method, fill(route, **world["ids"]), query=query))


PATH_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if endpoint in SESSION_PATH_ENDPOINTS + ASK_PATH_ENDPOINTS]


@FUZZ
@given(endpoint=st.sampled_from(PATH_ENDPOINTS), ref=st.text(max_size=40), safe=st.sampled_from(["", "/"]))
def test_fuzz_path_params_are_never_5xx(world, endpoint, ref, safe):
    method, route, _ = endpoint
    quoted = quote(ref, safe=safe)
    response = send(world["api"], method, fill(route, session_id=quoted, ask_id=quoted), {})
    assert_well_formed(response)
    assert response.status_code != 403  # another agent's or a missing object is a 404, never "forbidden"


@FUZZ
@given(header=st.text(alphabet=st.characters(max_codepoint=255, exclude_characters="\r\n"), max_size=60))
def test_fuzz_authorization_header_without_a_key_is_always_401(world, anon, header):
    anon.credentials(HTTP_AUTHORIZATION=header)
    response = send(anon, "GET", "/api/v1/events")
    code, _ = error_of(response, 401)
    assert code in {"not_authenticated", "invalid_key"}


# ------------------------------------------------------------------------------ ask_user_questions arguments

labels = st.one_of(st.sampled_from(["Yes", "No", "Later", "A", "B", "  ", ""]), st.text(STORABLE, max_size=14))
options = st.one_of(
    st.fixed_dictionaries({"label": labels}, optional={"description": st.text(STORABLE, max_size=30)}),
    st.fixed_dictionaries({"label": labels, "icon": json_values}),
    json_values,
)
option_lists = st.one_of(
    st.lists(st.sampled_from(["Yes", "No", "Later", "Never"]), min_size=2, max_size=4, unique=True).map(
        lambda names: [{"label": name} for name in names]
    ),
    st.lists(options, max_size=5),
)
questions = st.one_of(
    st.fixed_dictionaries(
        {"question": st.text(STORABLE, max_size=40), "header": st.text(STORABLE, max_size=14), "options": option_lists},
        optional={"multiSelect": st.booleans() | json_values},
    ),
    st.fixed_dictionaries(
        {"question": st.just("Which one?"), "header": st.text(STORABLE, min_size=1, max_size=12), "options": option_lists},
        optional={"multiSelect": st.booleans()},
    ),
    st.fixed_dictionaries({"question": st.text(STORABLE, max_size=10), "header": st.text(STORABLE, max_size=10), "extra": json_values}),
    json_values,
)
tool_arguments = st.one_of(
    st.fixed_dictionaries({"questions": st.lists(questions, max_size=5)}),
    st.fixed_dictionaries({"questions": st.lists(questions, min_size=1, max_size=4)}, optional={"urgent": json_values}),
    json_values,
)


@FUZZ
@given(arguments=tool_arguments)
def test_fuzz_ask_user_questions_arguments_answer_200_pending_or_failed(world, arguments):
    body = {"session": world["session"].id, "name": "ask_user_questions", "arguments": arguments}
    response = send(world["api"], "POST", "/api/v1/tools/call", body)
    assert response.status_code == 200, response.content[:500]
    data = response.json()
    assert data["status"] in {"pending", "failed"}
    if data["status"] == "pending":
        assert data["tool_result"] is None
        assert len(data["ask"]["questions"]) == len(arguments["questions"])
        assert data["ask"]["surfaces"] == ["test"]
    else:
        result = json.loads(data["tool_result"])
        assert set(result) == {"error", "reason"}
        # The session has the tool and a reachable surface: only the arguments can be wrong.
        assert result["reason"] == "invalid_arguments"
        assert result["error"].startswith("参数无效：arguments")
        assert data["ask"] is None


@FUZZ
@given(arguments=tool_arguments)
def test_fuzz_pending_asks_store_what_the_api_returns(world, arguments):
    body = {"session": world["session"].id, "name": "ask_user_questions", "arguments": arguments}
    data = send(world["api"], "POST", "/api/v1/tools/call", body).json()
    if data["status"] == "pending":
        stored = Ask.objects.get(pk=data["ask"]["id"])
        assert stored.questions == data["ask"]["questions"]
        assert stored.session_id == world["session"].id
    assert Session.objects.filter(pk=world["session"].id).exists()
