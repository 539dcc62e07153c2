"""Verification of Feishu callbacks (reference §2.3, §2.7).

Every check raises ``CallbackRejected`` with a message saying what was wrong; none of them ever
puts a secret, a token or a body into that message. ``open_callback`` runs them in the order the
callback view needs and returns the plaintext payload.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import os
import time
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from askcards.http import jsonlimits

MAX_AGE_SECONDS = 5 * 60
MAX_BODY_BYTES = 1024 * 1024  # Feishu callbacks are a few KB (the card action and its form values)

SIGNATURE_HEADER = "x-lark-signature"
TIMESTAMP_HEADER = "x-lark-request-timestamp"
NONCE_HEADER = "x-lark-request-nonce"

_BLOCK = 16


class CallbackRejected(Exception):
    """The callback is not provably from Feishu (or is too old); it must change no state."""


class MalformedBody(CallbackRejected):
    """The body (or what it decrypts to) is not JSON askcards reads: too large, too deep, not an
    object, or text no database can store. A client error (400), not an authentication failure."""


def signature(timestamp: str, nonce: str, encrypt_key: str, raw_body: bytes) -> str:
    """hex(sha256(timestamp + nonce + encrypt_key + raw body)), over the bytes exactly as received."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + raw_body).hexdigest()


def verify_signature(timestamp: str, nonce: str, encrypt_key: str, raw_body: bytes, signature_header: str) -> None:
    """Raise ``CallbackRejected`` unless ``signature_header`` is the signature of this request."""
    if not all(isinstance(part, str) and part for part in (timestamp, nonce, signature_header)):
        raise CallbackRejected("signature headers missing: X-Lark-Request-Timestamp, -Nonce and X-Lark-Signature")
    expected = signature(timestamp, nonce, encrypt_key, raw_body)
    if not hmac.compare_digest(expected.encode(), signature_header.strip().lower().encode()):
        raise CallbackRejected("X-Lark-Signature does not match the body (wrong encrypt key or altered request)")


def _aes_key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode()).digest()


def decrypt(encrypt_key: str, encrypted_b64: str) -> str:
    """AES-256-CBC: key = sha256(encrypt_key), IV = first 16 bytes, PKCS7 padding; UTF-8 text out."""
    if not isinstance(encrypted_b64, str) or not encrypted_b64:
        raise CallbackRejected("encrypt must be a non-empty base64 string")
    try:
        raw = base64.b64decode(encrypted_b64, validate=True)
    except (binascii.Error, ValueError):
        raise CallbackRejected("encrypt is not valid base64") from None
    iv, ciphertext = raw[:_BLOCK], raw[_BLOCK:]
    if len(iv) < _BLOCK or not ciphertext or len(ciphertext) % _BLOCK:
        raise CallbackRejected("encrypt has the wrong length for AES-CBC (16-byte IV + whole 16-byte blocks)")
    decryptor = Cipher(algorithms.AES(_aes_key(encrypt_key)), modes.CBC(iv)).decryptor()
    padded = decryptor.update(ciphertext) + decryptor.finalize()
    unpadder = padding.PKCS7(_BLOCK * 8).unpadder()
    try:
        plaintext = unpadder.update(padded) + unpadder.finalize()
        return plaintext.decode("utf-8")
    except ValueError:  # bad padding or not UTF-8: the key is wrong or the ciphertext was altered
        raise CallbackRejected("encrypt does not decrypt with this encrypt key (wrong key or altered data)") from None


def encrypt(encrypt_key: str, plaintext: str, *, iv: bytes | None = None) -> str:
    """What Feishu does to a callback body; used by tests and the fake server."""
    iv = iv if iv is not None else os.urandom(_BLOCK)
    padder = padding.PKCS7(_BLOCK * 8).padder()
    padded = padder.update(plaintext.encode("utf-8")) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_aes_key(encrypt_key)), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def verify_token(expected: str, received: Any) -> None:
    """Constant-time comparison of the verification token; an unconfigured token accepts nothing."""
    if not expected:
        raise CallbackRejected("the bot has no verification token configured, so no callback can be accepted")
    if not isinstance(received, str) or not hmac.compare_digest(expected.encode(), received.encode()):
        raise CallbackRejected("verification token does not match the bot's")


def check_fresh(timestamp: Any, *, now: float | None = None, max_age: float = MAX_AGE_SECONDS) -> None:
    """Reject a unix-seconds timestamp more than ``max_age`` in the past (or as far in the future)."""
    try:
        seconds = float(timestamp)
    except (TypeError, ValueError, OverflowError):
        raise CallbackRejected("request timestamp must be unix seconds") from None
    if not math.isfinite(seconds):  # nan compares false both ways and would pass the window below
        raise CallbackRejected("request timestamp must be unix seconds")
    now = time.time() if now is None else now
    if seconds < now - max_age:
        raise CallbackRejected(f"request timestamp is {int(now - seconds)} s old; at most {int(max_age)} s is accepted")
    if seconds > now + max_age:
        raise CallbackRejected("request timestamp is in the future beyond the allowed clock skew")


def microseconds(value: Any) -> float | None:
    """A ``create_time`` (microseconds since the epoch as a digit string or integer, reference
    §2.2) in unix seconds; None for anything else: ``nan``, ``inf``, signs, blanks, exponents or
    more digits than any real timestamp has (a huge integer would overflow the float)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    return int(text) / 1_000_000


def _header(headers: Mapping[str, str], name: str) -> str:
    # Proxies and test clients may change header case; Feishu's names are case-insensitive.
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return ""


def _json_object(text: str | bytes, what: str) -> dict[str, Any]:
    try:
        value = jsonlimits.load(text, what=what, max_bytes=MAX_BODY_BYTES)
    except jsonlimits.JSONRefused as exc:
        raise MalformedBody(str(exc)) from None
    if not isinstance(value, dict):
        raise MalformedBody(f"{what} must be a JSON object")
    return value


def open_callback(
    headers: Mapping[str, str],
    raw_body: bytes,
    *,
    encrypt_key: str,
    verification_token: str,
    now: float | None = None,
) -> dict[str, Any]:
    """Verify a callback request and return its plaintext JSON payload, or raise ``CallbackRejected``.

    With an encrypt key: the signature headers are required (checked over the raw body before
    anything is decrypted) and their timestamp must be fresh — except for the console's
    ``url_verification``, which the official SDK accepts unsigned; it is still decrypted and its
    token checked, and answering it changes no state. Without an encrypt key Feishu sends no
    signature, so the payload's own ``header.create_time`` is checked for freshness when present.
    The verification token is always compared (``header.token``, or ``token`` for url_verification).
    """
    body = _json_object(raw_body, "callback body")
    ts, nonce, sig = (_header(headers, name) for name in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER))
    signed = bool(encrypt_key and (ts or nonce or sig))
    if signed:
        verify_signature(ts, nonce, encrypt_key, raw_body, sig)
        check_fresh(ts, now=now)
    if "encrypt" in body:
        if not encrypt_key:
            raise CallbackRejected("callback is encrypted but the bot has no encrypt key configured")
        body = _json_object(decrypt(encrypt_key, body["encrypt"]), "decrypted callback")
    elif encrypt_key:
        raise CallbackRejected("the bot has an encrypt key, so callbacks must be encrypted")
    if body.get("type") == "url_verification":
        verify_token(verification_token, body.get("token"))
        return body
    if encrypt_key and not signed:
        verify_signature(ts, nonce, encrypt_key, raw_body, sig)  # raises: headers are missing
    header = body.get("header")
    header = header if isinstance(header, dict) else {}
    verify_token(verification_token, header.get("token", body.get("token")))
    if not signed and header.get("create_time") is not None:
        created = microseconds(header["create_time"])
        if created is None:
            raise CallbackRejected("header.create_time must be a microsecond timestamp")
        check_fresh(created, now=now)
    return body
