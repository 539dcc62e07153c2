"""Webhook signatures checked as an agent's receiver checks them (Standard Webhooks), from the
receiving end: the tests verify what the service sends with this, not with the service's signer."""
from __future__ import annotations

import base64
import hashlib
import hmac


def signature_valid(secret: str, msg_id: str, timestamp: int, body: bytes, header: str) -> bool:
    """Is one of the ``webhook-signature`` header's space-separated ``v1,<base64>`` signatures the
    HMAC-SHA256 of ``{msg_id}.{timestamp}.{body}`` under the secret (``whsec_`` + base64 key)?
    Compared in constant time; other versions are skipped."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest())
    for signature in header.split(" "):
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return True
    return False
