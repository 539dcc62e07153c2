"""Agent authentication: ``Authorization: Bearer <agent key>``; keys are stored hashed."""
from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission

from askcards import crypto
from askcards.models import Agent

KEYWORD = "Bearer"


class AgentKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].decode("latin-1").lower() != KEYWORD.lower():
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: expected 'Bearer <agent key>'.", code="invalid_key"
            )
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: expected exactly one key after 'Bearer', without spaces.",
                code="invalid_key",
            )
        try:
            key = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid agent key: it must be ASCII.", code="invalid_key") from None
        return authenticate_key(key), None

    def authenticate_header(self, request) -> str:
        return KEYWORD


def authenticate_key(key: str) -> Agent:
    """The agent owning this key. Lookup is by hash, so no secret is ever compared byte by byte."""
    # The webhook secret is read only by the worker: an agent whose stored secret the current
    # ASKCARDS_SECRET_KEY cannot decrypt (askcards.E002) still uses the API.
    agent = Agent.objects.defer("webhook_secret").filter(key_hash=crypto.hash_agent_key(key)).first()
    if agent is None:
        raise exceptions.AuthenticationFailed("Invalid agent key.", code="invalid_key")
    if not agent.is_active:
        raise exceptions.AuthenticationFailed("This agent is deactivated.", code="agent_inactive")
    return agent


class IsAgent(BasePermission):
    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, Agent)


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class AgentKeyScheme(OpenApiAuthenticationExtension):
        target_class = AgentKeyAuthentication
        name = "agentKey"

        def get_security_definition(self, auto_schema):
            return {
                "type": "http",
                "scheme": "bearer",
                "description": "The agent key printed once by `manage.py askcards_agent create`.",
            }

except ImportError:  # pragma: no cover - drf-spectacular is a listed dependency
    pass
