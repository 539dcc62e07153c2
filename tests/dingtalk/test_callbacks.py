"""DingTalk card callbacks: signature verification and parsing of every payload shape."""
from __future__ import annotations

import json

import pytest

from askcards.surfaces.dingtalk import callbacks
from askcards.surfaces.dingtalk.callbacks import (
    CANCEL,
    OTHER,
    SUBMIT,
    MalformedCallback,
    parse_callback,
    sign,
    verify_signature,
)
from tests.fakes.dingtalk import SHAPES, callback_payload, signed_callback

SECRET = "callback-api-secret"
NOW = 1_790_000_000.0  # seconds
NOW_MS = str(int(NOW * 1000))
Q_ID = "q_" + "a" * 32


# -- signature -------------------------------------------------------------------------------


def test_signature_made_like_dingtalk_verifies():
    headers, _ = signed_callback(SECRET, timestamp_ms=int(NOW * 1000), out_track_id="ask_1", user_id="u1")

    assert verify_signature(headers["x-ddpaas-signature-timestamp"], headers["x-ddpaas-signature"], SECRET, now=NOW)


def test_signature_is_base64_hmac_sha256_of_the_timestamp():
    # Computed independently: printf 1595925864847 | openssl dgst -sha256 -hmac secret -binary | base64
    assert sign("1595925864847", "secret") == "jreNM69mi/BGd4rH+WAQN6+VrqmJ/WX6R4MXExOTv+A="


def test_signature_with_another_secret_is_rejected():
    assert not verify_signature(NOW_MS, sign(NOW_MS, "other-secret"), SECRET, now=NOW)


def test_signature_for_another_timestamp_is_rejected():
    assert not verify_signature(NOW_MS, sign(str(int(NOW_MS) + 1), SECRET), SECRET, now=NOW)


@pytest.mark.parametrize("offset_seconds", [-301, 301, -3599, 3599])
def test_timestamp_outside_the_window_is_rejected_even_when_signed(offset_seconds):
    # The default window is 5 minutes (a captured pair is worth that long, and only once).
    stamp = str(int((NOW + offset_seconds) * 1000))

    assert not verify_signature(stamp, sign(stamp, SECRET), SECRET, now=NOW)


@pytest.mark.parametrize("offset_seconds", [-299, 299])
def test_timestamp_inside_the_window_is_accepted(offset_seconds):
    stamp = str(int((NOW + offset_seconds) * 1000))

    assert verify_signature(stamp, sign(stamp, SECRET), SECRET, now=NOW)


def test_window_can_be_tightened():
    stamp = str(int((NOW - 61) * 1000))

    assert not verify_signature(stamp, sign(stamp, SECRET), SECRET, now=NOW, max_skew=60)


@pytest.mark.parametrize("timestamp, signature", [
    (None, "x"), ("", "x"), (NOW_MS, None), (NOW_MS, ""), ("12ab", "x"), ("-1", "x"), ("１２３", "x"),
    (NOW_MS, "签名"),
])
def test_missing_or_garbled_headers_are_rejected(timestamp, signature):
    assert not verify_signature(timestamp, signature, SECRET, now=NOW)


def test_without_a_configured_secret_nothing_verifies():
    assert not verify_signature(NOW_MS, sign(NOW_MS, ""), "", now=NOW)


def test_signatures_are_compared_in_constant_time(monkeypatch):
    compared = []
    real = callbacks.hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(callbacks.hmac, "compare_digest", spy)
    assert verify_signature(NOW_MS, sign(NOW_MS, SECRET), SECRET, now=NOW)
    assert compared == [(sign(NOW_MS, SECRET).encode(), sign(NOW_MS, SECRET).encode())]


# -- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_submit_is_read_from_every_shape(shape):
    payload = callback_payload(out_track_id="ask_1", user_id="staff-1", question_id=Q_ID,
                               form={"answer_0": "a", "answer_1": ["x", "y"]}, shape=shape)

    event = parse_callback(json.dumps(payload))

    assert (event.out_track_id, event.question_id, event.user_id, event.action) == ("ask_1", Q_ID, "staff-1", SUBMIT)
    assert event.form == {"answer_0": "a", "answer_1": ["x", "y"]}
    assert not event.ignorable


@pytest.mark.parametrize("shape", SHAPES)
def test_cancel_is_read_from_every_shape(shape):
    payload = callback_payload(out_track_id="ask_1", user_id="staff-1", question_id=Q_ID, cancel=True, shape=shape)

    event = parse_callback(payload)

    assert event.action == CANCEL and event.form == {}


@pytest.mark.parametrize("shape", SHAPES)
def test_card_level_noise_is_ignorable(shape):
    event = parse_callback(callback_payload(out_track_id="ask_1", user_id="staff-1", question_id=Q_ID, shape=shape))

    assert event.action == OTHER and event.ignorable


@pytest.mark.parametrize("flag", [True, 1, "1", "true", "TRUE", "yes", "y", "on"])
def test_user_cancel_accepts_boolean_like_values(flag):
    payload = {"outTrackId": "ask_1", "userId": "u", "cardPrivateData": {"params": {"user_cancel": flag}}}

    assert parse_callback(payload).action == CANCEL


@pytest.mark.parametrize("flag", [False, 0, "false", "no", ""])
def test_user_cancel_false_is_not_a_cancel(flag):
    payload = {"outTrackId": "ask_1", "userId": "u", "cardPrivateData": {"params": {"user_cancel": flag}}}

    assert parse_callback(payload).ignorable


def test_cancel_wins_over_a_form_sent_with_it():
    payload = {"outTrackId": "ask_1", "userId": "u",
               "cardPrivateData": {"params": {"user_cancel": "true", "form": {"answer_0": "a"}}}}

    assert parse_callback(payload).action == CANCEL


def test_empty_form_object_is_a_submit_with_nothing_filled():
    event = parse_callback(callback_payload(out_track_id="ask_1", user_id="u", form={}))

    assert event.action == SUBMIT and event.form == {}


def test_form_sent_as_a_json_string_is_read():
    payload = {"outTrackId": "ask_1", "userId": "u", "cardPrivateData": {"params": {"form": '{"answer_0": "x"}'}}}

    assert parse_callback(payload).form == {"answer_0": "x"}


def test_question_id_is_the_fallback_when_out_track_id_is_missing():
    payload = {"userId": "u", "content": json.dumps({"cardPrivateData": {"actionIds": [Q_ID],
                                                                          "params": {"form": {"answer_0": "x"}}}})}

    event = parse_callback(payload)

    assert event.out_track_id == "" and event.question_id == Q_ID


def test_builtin_form_action_id_is_not_taken_for_a_question_id():
    event = parse_callback({"outTrackId": "ask_1", "userId": "u",
                            "cardPrivateData": {"actionIds": ["form"], "params": {"form": {}}}})

    assert event.question_id == ""


def test_clicker_is_found_inside_content_when_not_at_the_top():
    payload = {"outTrackId": "ask_1",
               "content": {"userId": " staff-7 ", "cardPrivateData": {"params": {"form": {"a": "1"}}}}}

    assert parse_callback(payload).user_id == "staff-7"


def test_payload_naming_nobody_parses_with_an_empty_user():
    event = parse_callback({"outTrackId": "ask_1", "cardPrivateData": {"params": {"form": {"a": "1"}}}})

    assert event.user_id == ""


def test_bytes_from_the_wire_are_accepted():
    _, body = signed_callback(SECRET, out_track_id="ask_9", user_id="u", form={"answer_0": "好"})

    assert parse_callback(body).form == {"answer_0": "好"}


@pytest.mark.parametrize("body, message", [
    (b"not json", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8"),
    ("[1, 2]", "must be a JSON object"),
    ("null", "missing"),
    ({"outTrackId": "ask_1", "content": "{broken"}, "content is not valid JSON"),
    ({"outTrackId": "ask_1", "content": "[1]"}, "content must be a JSON object"),
    ({"outTrackId": "ask_1", "cardPrivateData": {"actionIds": "q_1", "params": {}}}, "actionIds must be a list"),
    ({"outTrackId": "ask_1", "cardPrivateData": {"params": ["form"]}}, "params must be a JSON object"),
    ({"userId": "u", "cardPrivateData": {"params": {"form": {"a": 1}}}}, "no outTrackId and no question id"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    (b" " * (1024 * 1024 + 1), "larger than"),
])
def test_malformed_payloads_raise_a_clear_error(body, message):
    with pytest.raises(MalformedCallback, match=message):
        parse_callback(body)


def test_a_form_that_is_not_an_object_is_malformed_and_names_the_card():
    with pytest.raises(MalformedCallback) as raised:
        parse_callback({"outTrackId": "ask_5", "cardPrivateData": {"params": {"form": "bad"}}})

    assert raised.value.out_track_id == "ask_5"
    assert "params.form" in str(raised.value)
