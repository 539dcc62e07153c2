"""Secrets at rest and keys: encryption of bot secrets, hashing of agent keys, webhook signing."""
from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


def _fernet() -> Fernet:
    return _fernet_for(settings.SECRET_KEY)


@functools.lru_cache(maxsize=4)
def _fernet_for(secret_key: str) -> Fernet:
    # Derive a dedicated key so the Django SECRET_KEY itself never encrypts data directly.
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"askcards", info=b"secrets-at-rest").derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


class UndecryptableSecret(ValueError):
    """A stored secret the current key cannot decrypt (ASKCARDS_SECRET_KEY changed or was lost).

    ``manage.py check --database default`` names the rows (askcards.E002); serve and the worker
    run that check at start."""


def decrypt(token: str) -> str:
    return _decrypt(token, settings.SECRET_KEY)


# Bot rows are read on every callback and card push, each with several secrets: a stored token
# decrypts to the same plaintext every time, so the last few hundred are remembered (the
# plaintexts are in memory on the loaded rows anyway).
@functools.lru_cache(maxsize=512)
def _decrypt(token: str, secret_key: str) -> str:
    try:
        return _fernet_for(secret_key).decrypt(token.encode()).decode()
    except InvalidToken:
        raise UndecryptableSecret(
            "stored secret cannot be decrypted: ASKCARDS_SECRET_KEY differs from the one it was saved with"
        ) from None


AGENT_KEY_PREFIX = "ak_"


def new_agent_key() -> str:
    return AGENT_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_agent_key(key: str) -> str:
    """Agent keys carry 256 random bits, so one SHA-256 is enough; lookups go by this hash."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """Standard Webhooks: base64 HMAC-SHA256 over "{id}.{timestamp}.{body}" with the decoded secret."""
    raw = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(raw, signed, hashlib.sha256).digest()).decode()
