"""DingTalk card callbacks: signature check and payload parsing. Pure functions, no views.

Signature (platform §1.4): DingTalk sends ``x-ddpaas-signature-timestamp`` and
``x-ddpaas-signature`` = Base64(HMAC-SHA256(key=apiSecret, msg=timestamp)). The body is not signed,
so a captured pair could carry any body while its timestamp is accepted: the window is short and
each pair is accepted once (``replay_key``, recorded by the caller with the callback's effect).

Payload (plugin reference §6, platform §1.3): the same click arrives in three shapes —
``content`` (a JSON string, or an object from Stream SDKs) holding ``cardPrivateData``; ``value``
with ``params`` beside ``cardPrivateData``; or a top-level ``cardPrivateData``. ``parse_callback``
accepts all three and raises ``MalformedCallback`` for anything it cannot read.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from dataclasses import dataclass, field
from typing import Any

from askcards.http import jsonlimits

SIGNATURE_HEADER = "x-ddpaas-signature"
TIMESTAMP_HEADER = "x-ddpaas-signature-timestamp"
# No window is documented for card callbacks (the robot-message rule is ±1 hour, platform §1.4);
# a callback is answered within 2 s (§1.6), so 5 minutes covers delivery and clock drift.
# project/settings.py ASKCARDS_DINGTALK_CALLBACK_SKEW_SECONDS says why.
DEFAULT_MAX_SKEW_SECONDS = 300
MAX_PAYLOAD_BYTES = 1024 * 1024
# What a person wrote is not bounded here: a callback that cannot be read is a 400, which DingTalk
# shows the person as a generic failure, losing their answer. The answer's lengths are checked
# with the rest of the form (the tool's ``check_form``, the panel's rule too) and a refusal is
# told on the card; what the card shows of a long answer is shortened there (``cards``).
# Ids are short (outTrackId ≤ 100 characters, platform §3.6; staff ids a few dozen); 200 is the
# narrowest column a user id reaches ("respondent:<userId>" in AskEvent.actor).
MAX_ID_CHARS = 200

SUBMIT = "submit"
CANCEL = "cancel"
OTHER = "other"

_TRUTHY = {"true", "1", "yes", "y", "on"}
# askcards ids are q_<32 hex>; the reference plugin's are q_<uuid>.
_QUESTION_ID = re.compile(r"q_[0-9A-Za-z-]{1,64}")


class MalformedCallback(ValueError):
    """The callback body cannot be read as a DingTalk card callback. Nothing should change."""

    def __init__(self, message: str, *, out_track_id: str = ""):
        super().__init__(message)
        self.out_track_id = out_track_id


@dataclass(frozen=True)
class CardCallback:
    out_track_id: str  # "" when the payload carries none
    question_id: str  # actionIds[0] when it is a question id (the template's ${question_id}), else ""
    user_id: str  # the clicker ("" when the payload names nobody: callers must fail closed)
    action: str  # SUBMIT | CANCEL | OTHER
    form: dict[str, Any] = field(default_factory=dict)  # params.form of a submit

    @property
    def ignorable(self) -> bool:
        """Not a submit or cancel: template noise such as the card-level ``fromConfig`` event."""
        return self.action == OTHER


def sign(timestamp: str, api_secret: str) -> str:
    digest = hmac.new(api_secret.encode(), str(timestamp).encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify_signature(timestamp: str | None, signature: str | None, api_secret: str, *,
                     now: float | None = None, max_skew: float = DEFAULT_MAX_SKEW_SECONDS) -> bool:
    """True when ``signature`` signs ``timestamp`` (milliseconds since the epoch) with ``api_secret``
    and the timestamp is within ``max_skew`` seconds of ``now``. An empty secret never verifies."""
    if not api_secret or not timestamp or not signature:
        return False
    timestamp = timestamp.strip()
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 16:
        return False
    sent_at = int(timestamp) / 1000
    current = time.time() if now is None else now
    if abs(current - sent_at) > max_skew:
        return False
    try:
        given = signature.strip().encode("ascii")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(given, sign(timestamp, api_secret).encode("ascii"))


class ReplayedCallback(Exception):
    """This signature pair was already accepted once: a replay, whatever body it now carries."""


def replay_key(timestamp: str, signature: str) -> str:
    """The receipt id of a verified ``(timestamp, signature)`` pair (as ``verify_signature`` read
    it, surrounding whitespace ignored): each pair is accepted once. A digest, so the receipt
    table never holds a usable signature."""
    pair = f"{timestamp.strip()}:{signature.strip()}".encode("ascii", "replace")
    return "signature:" + hashlib.sha256(pair).hexdigest()


def parse_callback(payload: Any) -> CardCallback:
    """Read one card callback (bytes, str or an already decoded object). Raises MalformedCallback,
    also for text no database stores (NUL, lone surrogates; object keys too) and over-long ids."""
    body = _as_object(_decode(payload), "callback body")
    if not isinstance(payload, (bytes, bytearray, str)):  # text was checked by the loader
        _check_text(body, "callback body")
    content = _as_object(body.get("content"), "content", optional=True)
    value = _as_object(body.get("value"), "value", optional=True)
    private = (
        _as_object(content.get("cardPrivateData"), "content.cardPrivateData", optional=True)
        or _as_object(body.get("cardPrivateData"), "cardPrivateData", optional=True)
        or _as_object(value.get("cardPrivateData"), "value.cardPrivateData", optional=True)
    )
    params = (
        _as_object(private.get("params"), "cardPrivateData.params", optional=True)
        or _as_object(content.get("params"), "content.params", optional=True)
        or _as_object(value.get("params"), "value.params", optional=True)
    )
    out_track_id = _first_string("outTrackId", body, content, value, private)
    user_id = _first_string("userId", body, content, value, private)

    action_ids = private.get("actionIds", [])
    if not isinstance(action_ids, list):
        raise MalformedCallback("cardPrivateData.actionIds must be a list", out_track_id=out_track_id)
    action_id = action_ids[0] if action_ids and isinstance(action_ids[0], str) else ""
    question_id = action_id if _QUESTION_ID.fullmatch(action_id) else ""

    form = params.get("form")
    if _truthy(params.get("user_cancel")):
        action, form = CANCEL, {}
    elif form is not None and form != "" and form is not False:
        action = SUBMIT
        if isinstance(form, str):
            form = _json_object_or_none(form)
        if not isinstance(form, dict):
            raise MalformedCallback("params.form of a submit must be an object", out_track_id=out_track_id)
    else:
        action, form = OTHER, {}
    if action != OTHER and not out_track_id and not question_id:
        raise MalformedCallback("a submit or cancel names no outTrackId and no question id")
    for name, text in (("outTrackId", out_track_id), ("userId", user_id), ("actionIds[0]", action_id)):
        if len(text) > MAX_ID_CHARS:
            raise MalformedCallback(f"{name} is longer than {MAX_ID_CHARS} characters", out_track_id=out_track_id[:MAX_ID_CHARS])
    return CardCallback(out_track_id, question_id, user_id, action, form)


def _decode(payload: Any) -> Any:
    if isinstance(payload, (bytes, bytearray, str)):
        return _loads(payload, "callback body")
    return payload


def _loads(text: str | bytes | bytearray, what: str) -> Any:
    try:
        return jsonlimits.load(text, what=what, max_bytes=MAX_PAYLOAD_BYTES)
    except jsonlimits.JSONRefused as exc:
        raise MalformedCallback(str(exc)) from None


def _check_text(value: Any, what: str) -> None:
    """Decoded objects (Stream SDK shapes) get the rule ``jsonlimits.load`` applies to text."""
    try:
        jsonlimits.check_text(value, what)
    except jsonlimits.JSONRefused as exc:
        raise MalformedCallback(str(exc)) from None


def _as_object(value: Any, what: str, *, optional: bool = False) -> dict[str, Any]:
    """A JSON object given as an object or as a JSON string; {} for an absent optional value."""
    if value is None or (optional and value == ""):
        if optional:
            return {}
        raise MalformedCallback(f"{what} is missing")
    if isinstance(value, str):
        value = _loads(value, what)
    if not isinstance(value, dict):
        raise MalformedCallback(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _json_object_or_none(text: str) -> dict[str, Any] | None:
    try:
        value = jsonlimits.load(text, what="params.form", max_bytes=MAX_PAYLOAD_BYTES)
    except jsonlimits.JSONRefused as exc:
        if exc.code == "invalid_text":
            raise MalformedCallback(str(exc)) from None
        return None
    return value if isinstance(value, dict) else None


def _first_string(key: str, *layers: dict[str, Any]) -> str:
    for layer in layers:
        value = layer.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _truthy(value: Any) -> bool:
    if value is True:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 1
    return isinstance(value, str) and value.strip().lower() in _TRUTHY
