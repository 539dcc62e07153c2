"""Agent authentication: ``Authorization: Bearer <agent key>``; keys are stored hashed."""
from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission

from askcards import selectors
from askcards.errors import Unauthenticated
from askcards.models import Agent

class AgentKeyAuthentication(BaseAuthentication):
    """``Authorization: Bearer <agent key>`` (``selectors.agent_for_authorization``, MCP's rule too)."""

    def authenticate(self, request):
        header = get_authorization_header(request)
        if not header.split():
            return None  # DRF answers 401 not_authenticated
        try:
            return selectors.agent_for_authorization(header), None
        except Unauthenticated as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from None

    def authenticate_header(self, request) -> str:
        return selectors.BEARER


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
