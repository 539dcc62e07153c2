"""Who is calling: the agent an ``Authorization: Bearer <agent key>`` header names."""
from __future__ import annotations

from .. import crypto
from ..db import statements
from ..errors import Unauthenticated
from ..models import Agent


BEARER = "Bearer"


def agent_for_authorization(header: str | bytes | None) -> Agent:
    """The agent whose key an ``Authorization: Bearer <agent key>`` header carries (the REST API
    and MCP share this one rule); Unauthenticated saying what is wrong otherwise. Lookup is by
    the key's hash, so no secret is ever compared byte by byte."""
    if isinstance(header, bytes):
        try:
            header = header.decode("ascii")
        except UnicodeError:
            raise Unauthenticated("Invalid agent key: it must be ASCII.", "invalid_key") from None
    parts = (header or "").split()
    if not parts:
        raise Unauthenticated(f"This endpoint needs 'Authorization: {BEARER} <agent key>' (the agent's REST key).")
    if parts[0].lower() != BEARER.lower():
        raise Unauthenticated(f"Invalid Authorization header: expected '{BEARER} <agent key>'.", "invalid_key")
    if len(parts) != 2:
        raise Unauthenticated(
            f"Invalid Authorization header: expected exactly one key after '{BEARER}', without spaces.", "invalid_key"
        )
    # The webhook secret is not read (askcards.E002: an agent whose stored secret the current
    # ASKCARDS_SECRET_KEY cannot decrypt still uses the API).
    agent = statements.agent_by_key_hash(crypto.hash_agent_key(parts[1]))
    if agent is None:
        raise Unauthenticated("Invalid agent key.", "invalid_key")
    if not agent.is_active:
        raise Unauthenticated("This agent is deactivated.", "agent_inactive")
    return agent
