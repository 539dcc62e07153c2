"""Who is calling: the agent an ``Authorization: Bearer <agent key>`` header names."""
from __future__ import annotations

from .. import crypto
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
    # The webhook secret is read only by the worker: an agent whose stored secret the current
    # ASKCARDS_SECRET_KEY cannot decrypt (askcards.E002) still uses the API.
    agent = Agent.objects.defer("webhook_secret").filter(key_hash=crypto.hash_agent_key(parts[1])).first()
    if agent is None:
        raise Unauthenticated("Invalid agent key.", "invalid_key")
    if not agent.is_active:
        raise Unauthenticated("This agent is deactivated.", "agent_inactive")
    return agent
