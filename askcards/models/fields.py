"""Public ids and the encrypted text field the models share."""
from __future__ import annotations

import secrets

from django.db import models

from .. import crypto


def _public_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def new_ask_id() -> str:
    return _public_id("q")


def new_session_id() -> str:
    return _public_id("s")


def new_out_track_id() -> str:
    return _public_id("ask")


class EncryptedTextField(models.TextField):
    """Stored encrypted (Fernet, key derived from ASKCARDS_SECRET_KEY); Python side sees plaintext."""

    def from_db_value(self, value, expression, connection):
        if value in (None, ""):
            return value
        return crypto.decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value in (None, ""):
            return value
        return crypto.encrypt(value)
