from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from askcards.surfaces.feishu import security
from askcards.surfaces.feishu.cards import render_progress_card
from askcards.surfaces.feishu.parse import (
    CardAction,
    IncompleteAnswer,
    MalformedCallback,
    NotACardAction,
    form_answers,
    parse_card_action,
)

from .helpers import ask_id, forms, pending, question, view

ASK = ask_id(1)
SINGLE = question("Which database?", header="DB", labels=("PostgreSQL", "SQLite", "MySQL"))
MULTI = question("Which caches?", header="Cache", multi=True, labels=("Redis", "Memcached", "Local"))
QUESTIONS = [SINGLE, MULTI]


def _payload(**action_overrides) -> dict:
    """The plaintext body of reference §2.2, for our submit button."""
    action = {
        "value": {"kind": "feishu_ask", "act": "submit", "sessionId": "s_1", "requestId": ASK, "sender": "ou_alice"},
        "tag": "button",
        "name": "submit_1",
        "form_value": {"q1_0": "1", "c1_0": "", "q1_1": ["0", "2"], "c1_1": "extra text"},
    }
    action.update(action_overrides)
    return {
        "schema": "2.0",
        "header": {"event_id": "ev-1", "token": "vt", "create_time": "1603977298000000",
                   "event_type": "card.action.trigger", "tenant_key": "tk", "app_id": "cli_1"},
        "event": {
            "operator": {"tenant_key": "tk", "open_id": "ou_alice", "union_id": "on_1"},
            "token": "c-1",
            "action": action,
            "host": "im_message",
            "context": {"open_message_id": "om_1", "open_chat_id": "oc_1"},
        },
    }


# --- parse_card_action ---------------------------------------------------------------------------


def test_parses_the_documented_submit_callback():
    action = parse_card_action(_payload())
    assert action == CardAction(
        operator="ou_alice", kind="feishu_ask", act="submit", ask_id=ASK, session_id="s_1", sender="ou_alice",
        form_index=1, form_value={"q1_0": "1", "c1_0": "", "q1_1": ["0", "2"], "c1_1": "extra text"},
        event_id="ev-1", message_id="om_1", chat_id="oc_1", created_at=1603977298.0,
    )


def test_parses_raw_bytes_and_json_string_values():
    payload = _payload(value=json.dumps(_payload()["event"]["action"]["value"]),
                       form_value=json.dumps({"q1_0": "0"}))
    action = parse_card_action(json.dumps(payload).encode())
    assert (action.ask_id, action.form_value) == (ASK, {"q1_0": "0"})


def test_parses_the_flattened_envelope():
    flat = _payload()["event"]
    action = parse_card_action(flat)
    assert (action.operator, action.ask_id, action.form_index, action.event_id) == ("ou_alice", ASK, 1, "")


def test_form_index_comes_from_field_keys_when_the_name_is_missing():
    assert parse_card_action(_payload(name=None, form_value={"q3_0": "1"})).form_index == 3


def test_cancel_button_of_the_progress_card():
    value = {"kind": "feishu_progress", "act": "cancel", "sessionId": "s_1", "sender": "ou_alice"}
    action = parse_card_action(_payload(value=value, name=None, form_value=None))
    assert (action.kind, action.act, action.ask_id, action.form_value) == ("feishu_progress", "cancel", "", {})


def test_other_event_types_are_not_card_actions():
    payload = _payload()
    payload["header"]["event_type"] = "im.message.receive_v1"
    with pytest.raises(NotACardAction, match="im.message.receive_v1"):
        parse_card_action(payload)


def _without_operator():
    payload = _payload()
    del payload["event"]["operator"]
    return payload


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"not json", "callback body is not valid JSON"),
        ([1, 2], "callback body must be a JSON object"),
        (_without_operator(), "open_id must be a non-empty string"),
        ({"event": {"operator": {"open_id": "ou_1"}}}, "event.action must be a JSON object"),
        (_payload(value=None), "event.action.value must be a JSON object"),
        (_payload(value="{broken"), "event.action.value is not valid JSON"),
        (_payload(value={"act": "submit"}), "value.kind must be a non-empty string"),
        (_payload(value={"kind": "feishu_ask", "requestId": "q_1; DROP", "sessionId": "s"}), "not an ask id"),
        (_payload(value={"kind": "feishu_ask", "requestId": ASK}), "sessionId must be a non-empty string"),
        (_payload(form_value=["q1_0"]), "form_value must be a JSON object"),
        (_payload(form_value={"q1_0": "1", "q2_0": "1"}), "mixes fields of several forms"),
        (_payload(name="submit_0"), "do not belong to form 'submit_0'"),
        (_payload(name=["submit_1"]), "event.action.name must be a string"),
    ],
)
def test_malformed_payloads_raise_a_clear_error(payload, message):
    with pytest.raises(MalformedCallback, match=message):
        parse_card_action(payload)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["header", "event", "operator", "action", "context", "schema"]), json_values))
def test_arbitrary_json_gives_an_action_or_a_clear_error(payload):
    try:
        parse_card_action(payload)
    except MalformedCallback as error:
        assert str(error)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values, json_values)
def test_arbitrary_action_fields_give_an_action_or_a_clear_error(value, form_value, name):
    try:
        parse_card_action(_payload(value=value, form_value=form_value, name=name))
    except MalformedCallback as error:
        assert str(error)


# --- form_answers ---------------------------------------------------------------------------------


def test_single_select_label_and_multi_select_labels_with_text():
    answers = form_answers(QUESTIONS, {"q1_0": "1", "c1_0": "", "q1_1": ["2", "0"], "c1_1": " extra "}, 1)
    assert answers == [
        {"question": "Which database?", "selectedLabels": ["SQLite"], "customInput": None},
        {"question": "Which caches?", "selectedLabels": ["Local", "Redis"], "customInput": "extra"},
    ]


def test_single_select_other_text_wins_over_the_selection():
    answers = form_answers([SINGLE], {"q0_0": "2", "c0_0": "CockroachDB"}, 0)
    assert answers == [{"question": "Which database?", "selectedLabels": [], "customInput": "CockroachDB"}]


def test_multi_select_keeps_only_text_when_nothing_is_selected():
    answers = form_answers([MULTI], {"q0_0": [], "c0_0": "none of them"}, 0)
    assert answers[0]["selectedLabels"] == [] and answers[0]["customInput"] == "none of them"


@pytest.mark.parametrize("selection", ['["2","0"]', [{"value": "2"}, {"value": "0"}], ["2", "0", "2"]])
def test_multi_select_values_in_every_delivered_shape_keep_the_selection_order(selection):
    answers = form_answers([MULTI], {"q0_0": selection}, 0)
    assert answers[0]["selectedLabels"] == ["Local", "Redis"]


@pytest.mark.parametrize("selection", ["1", {"value": "1"}, ["1"], 1])
def test_single_select_values_in_every_delivered_shape(selection):
    assert form_answers([SINGLE], {"q0_0": selection}, 0)[0]["selectedLabels"] == ["SQLite"]


@pytest.mark.parametrize("form_value", [{}, {"q0_0": "", "c0_0": ""}, {"q0_0": [], "c0_0": "   "}, {"q0_0": None}])
def test_a_question_with_neither_selection_nor_text_is_incomplete(form_value):
    with pytest.raises(IncompleteAnswer) as excinfo:
        form_answers([MULTI], form_value, 0)
    assert excinfo.value.questions == (0,)


def test_incomplete_answer_names_every_blank_question():
    with pytest.raises(IncompleteAnswer, match="question 1, 3") as excinfo:
        form_answers([SINGLE, MULTI, SINGLE], {"q2_1": ["1"]}, 2)
    assert excinfo.value.questions == (0, 2)


def test_legacy_unprefixed_keys_are_accepted():
    answers = form_answers(QUESTIONS, {"q0": "0", "q1": ["1"]}, None)
    assert [a["selectedLabels"] for a in answers] == [["PostgreSQL"], ["Memcached"]]


@pytest.mark.parametrize(
    "form_value, message",
    [
        ({"q0_0": "3"}, "option 3 does not exist"),
        ({"q0_0": "-1"}, "not an option value"),
        ({"q0_0": "٣"}, "not an option value"),
        ({"q0_0": ["0", "1"]}, "several options of a single-select"),
        ({"q0_0": {"x": 1}}, "question 1 \\(q0_0\\) holds an object without an option value"),
        ({"q0_0": 2.5}, "question 1 \\(q0_0\\) holds '2.5'"),
        ({"q0_0": True}, "not an option value"),
        ({"c0_0": ["text"]}, "other text \\(c0_0\\) must be text"),
        ({"c0_0": "x" * 10_001}, "longer than 10000 characters"),
    ],
)
def test_values_the_form_cannot_produce_are_malformed(form_value, message):
    with pytest.raises(MalformedCallback, match=message):
        form_answers([SINGLE], form_value, 0)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["q0_0", "c0_0", "q0_1", "c0_1", "q0", "c1"]), json_values))
def test_arbitrary_form_values_give_answers_or_a_clear_outcome(form_value):
    try:
        answers = form_answers(QUESTIONS, form_value, 0)
    except (IncompleteAnswer, MalformedCallback) as error:
        assert str(error)
    else:
        assert [a["question"] for a in answers] == ["Which database?", "Which caches?"]
        assert all(a["selectedLabels"] or a["customInput"] for a in answers)


# --- the card, the click and the answer fit together ----------------------------------------------


def _click(card: dict, form_name: str, choose) -> dict:
    """What Feishu sends when the sender fills form ``form_name`` of ``card`` and presses submit."""
    (form,) = [f for f in forms(card) if f["name"] == form_name]
    form_value = {}
    for element in form["elements"]:
        if element["tag"] in ("select_static", "multi_select_static", "input"):
            form_value[element["name"]] = choose(element)
    button = form["elements"][-1]
    return _payload(value=button["behaviors"][0]["value"], name=button["name"], form_value=form_value)


def test_a_submit_on_a_rendered_card_maps_back_to_its_ask_and_answers():
    first, second = pending(1), pending(2, QUESTIONS, sender="ou_bob")
    card = render_progress_card(view(asks=(first, second))).card

    def choose(element):
        return {"select_static": "2", "multi_select_static": ["1"], "input": ""}[element["tag"]]

    payload = _click(card, "ask_1", choose)
    raw = json.dumps({"encrypt": security.encrypt("ek", json.dumps(payload))}).encode()
    headers = {"X-Lark-Request-Timestamp": "1603977298", "X-Lark-Request-Nonce": "n",
               "X-Lark-Signature": security.signature("1603977298", "n", "ek", raw)}
    opened = security.open_callback(headers, raw, encrypt_key="ek", verification_token="vt", now=1603977300)

    action = parse_card_action(opened)
    assert (action.ask_id, action.sender, action.form_index) == (ask_id(2), "ou_bob", 1)
    assert form_answers(second.questions, action.form_value, action.form_index) == [
        {"question": "Which database?", "selectedLabels": ["MySQL"], "customInput": None},
        {"question": "Which caches?", "selectedLabels": ["Memcached"], "customInput": None},
    ]
