from __future__ import annotations

import base64
import json

import pytest

from askcards.surfaces.feishu import security
from askcards.surfaces.feishu.security import CallbackRejected

# Official test vector (reference §2.7).
VECTOR_KEY = "test key"
VECTOR_CIPHERTEXT = "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk="

ENCRYPT_KEY = "ek-123"
TOKEN = "vt-abc"
NOW = 1_760_000_000.0


def test_decrypt_official_vector_gives_hello_world():
    assert security.decrypt(VECTOR_KEY, VECTOR_CIPHERTEXT) == "hello world"


def test_decrypt_round_trips_what_encrypt_produced():
    text = json.dumps({"challenge": "c-1", "note": "提交答案"}, ensure_ascii=False)
    assert security.decrypt(ENCRYPT_KEY, security.encrypt(ENCRYPT_KEY, text)) == text


def test_decrypt_with_wrong_key_is_rejected_clearly():
    with pytest.raises(CallbackRejected, match="does not decrypt with this encrypt key"):
        security.decrypt("another key", VECTOR_CIPHERTEXT)


def test_decrypt_of_tampered_last_block_is_rejected():
    raw = bytearray(base64.b64decode(VECTOR_CIPHERTEXT))
    raw[-1] ^= 0x01
    with pytest.raises(CallbackRejected, match="wrong key or altered data"):
        security.decrypt(VECTOR_KEY, base64.b64encode(bytes(raw)).decode())


@pytest.mark.parametrize(
    "value, message",
    [
        ("not base64!!", "not valid base64"),
        (base64.b64encode(b"short").decode(), "wrong length"),
        (base64.b64encode(b"x" * 16 + b"y" * 15).decode(), "wrong length"),
        ("", "non-empty base64"),
        (None, "non-empty base64"),
    ],
)
def test_decrypt_malformed_input_is_rejected_with_reason(value, message):
    with pytest.raises(CallbackRejected, match=message):
        security.decrypt(VECTOR_KEY, value)


def test_signature_is_sha256_over_timestamp_nonce_key_and_raw_body():
    import hashlib

    body = b'{"encrypt":"abc"}'
    expected = hashlib.sha256(b"1700000000" + b"nonce" + ENCRYPT_KEY.encode() + body).hexdigest()
    assert security.signature("1700000000", "nonce", ENCRYPT_KEY, body) == expected


def test_verify_signature_accepts_the_right_one():
    body = b'{"encrypt":"abc"}'
    sig = security.signature("1700000000", "n1", ENCRYPT_KEY, body)
    security.verify_signature("1700000000", "n1", ENCRYPT_KEY, body, sig)


def test_verify_signature_rejects_an_altered_body():
    sig = security.signature("1700000000", "n1", ENCRYPT_KEY, b'{"encrypt":"abc"}')
    with pytest.raises(CallbackRejected, match="does not match"):
        security.verify_signature("1700000000", "n1", ENCRYPT_KEY, b'{"encrypt":"abd"}', sig)


def test_verify_signature_rejects_missing_headers():
    with pytest.raises(CallbackRejected, match="signature headers missing"):
        security.verify_signature("", "n1", ENCRYPT_KEY, b"{}", "00")


def test_verify_token_compares_exactly():
    security.verify_token(TOKEN, TOKEN)
    for wrong in ("vt-abd", "", None, 123):
        with pytest.raises(CallbackRejected, match="verification token"):
            security.verify_token(TOKEN, wrong)


def test_verify_token_without_a_configured_token_accepts_nothing():
    with pytest.raises(CallbackRejected, match="no verification token configured"):
        security.verify_token("", "")


def test_check_fresh_accepts_within_five_minutes():
    security.check_fresh(str(int(NOW) - 299), now=NOW)


def test_check_fresh_rejects_older_than_five_minutes():
    with pytest.raises(CallbackRejected, match="301 s old"):
        security.check_fresh(str(int(NOW) - 301), now=NOW)


def test_check_fresh_rejects_far_future_and_garbage():
    with pytest.raises(CallbackRejected, match="future"):
        security.check_fresh(NOW + 600, now=NOW)
    with pytest.raises(CallbackRejected, match="unix seconds"):
        security.check_fresh("yesterday", now=NOW)


# --- open_callback: the whole check as the view runs it -------------------------------------------


def _event(token: str = TOKEN, create_time: float = NOW) -> dict:
    return {
        "schema": "2.0",
        "header": {"event_id": "ev1", "token": token, "create_time": str(int(create_time * 1_000_000)),
                   "event_type": "card.action.trigger"},
        "event": {"operator": {"open_id": "ou_1"}, "action": {"value": {"kind": "feishu_ask"}}},
    }


def _signed(payload: dict, *, key: str = ENCRYPT_KEY, ts: float = NOW, nonce: str = "n1") -> tuple[dict, bytes]:
    raw = json.dumps({"encrypt": security.encrypt(key, json.dumps(payload))}).encode()
    headers = {
        "X-Lark-Request-Timestamp": str(int(ts)),
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": security.signature(str(int(ts)), nonce, key, raw),
    }
    return headers, raw


def test_open_callback_decrypts_a_signed_encrypted_event():
    headers, raw = _signed(_event())
    payload = security.open_callback(headers, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)
    assert payload["header"]["event_id"] == "ev1"


def test_open_callback_finds_headers_in_any_case():
    headers, raw = _signed(_event())
    lower = {key.lower(): value for key, value in headers.items()}
    assert security.open_callback(lower, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


def test_open_callback_rejects_a_body_changed_after_signing():
    headers, raw = _signed(_event())
    other = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(_event()))}).encode()
    with pytest.raises(CallbackRejected, match="does not match"):
        security.open_callback(headers, other, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


def test_open_callback_rejects_a_replay_older_than_five_minutes():
    headers, raw = _signed(_event(), ts=NOW - 400)
    with pytest.raises(CallbackRejected, match="s old"):
        security.open_callback(headers, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


def test_open_callback_requires_signature_when_an_encrypt_key_is_set():
    _, raw = _signed(_event())
    with pytest.raises(CallbackRejected, match="signature headers missing"):
        security.open_callback({}, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


def test_open_callback_rejects_plaintext_when_an_encrypt_key_is_set():
    raw = json.dumps(_event()).encode()
    with pytest.raises(CallbackRejected, match="must be encrypted"):
        security.open_callback({}, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


def test_open_callback_rejects_a_wrong_token_inside_a_valid_signature():
    headers, raw = _signed(_event(token="someone-else"))
    with pytest.raises(CallbackRejected, match="verification token"):
        security.open_callback(headers, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)


def test_open_callback_answers_unsigned_encrypted_url_verification_with_token_check():
    challenge = {"challenge": "ch-1", "token": TOKEN, "type": "url_verification"}
    raw = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(challenge))}).encode()
    payload = security.open_callback({}, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)
    assert payload["challenge"] == "ch-1"


def test_open_callback_rejects_url_verification_with_wrong_token():
    raw = json.dumps({"challenge": "ch-1", "token": "nope", "type": "url_verification"}).encode()
    with pytest.raises(CallbackRejected, match="verification token"):
        security.open_callback({}, raw, encrypt_key="", verification_token=TOKEN, now=NOW)


def test_open_callback_plaintext_mode_checks_token_and_event_age():
    fresh = json.dumps(_event()).encode()
    assert security.open_callback({}, fresh, encrypt_key="", verification_token=TOKEN, now=NOW)["event"]
    old = json.dumps(_event(create_time=NOW - 600)).encode()
    with pytest.raises(CallbackRejected, match="s old"):
        security.open_callback({}, old, encrypt_key="", verification_token=TOKEN, now=NOW)


def test_open_callback_rejects_encrypted_body_when_bot_has_no_key():
    headers, raw = _signed(_event())
    with pytest.raises(CallbackRejected, match="no encrypt key configured"):
        security.open_callback(headers, raw, encrypt_key="", verification_token=TOKEN, now=NOW)


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1,2]", b"\xff\xfe"])
def test_open_callback_rejects_bodies_that_are_not_json_objects(raw):
    with pytest.raises(CallbackRejected, match="callback body"):
        security.open_callback({}, raw, encrypt_key="", verification_token=TOKEN, now=NOW)


def test_rejection_messages_never_contain_secrets():
    headers, raw = _signed(_event(token="leaked-token-value"))
    with pytest.raises(CallbackRejected) as excinfo:
        security.open_callback(headers, raw, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, now=NOW)
    assert "leaked-token-value" not in str(excinfo.value)
    assert TOKEN not in str(excinfo.value) and ENCRYPT_KEY not in str(excinfo.value)
