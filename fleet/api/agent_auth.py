"""Node agents authenticate with their node's agentToken: ``Authorization: Bearer <agentToken>``.

The agent API uses only these classes (never ApiKeyAuthentication or FleetAdmin):
a token reaches only its own node, and an API key is not an agent token.
"""

from __future__ import annotations

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from fleet.models import Node
from fleet.tokens import bearer_token, token_hash


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """``request.auth`` is the Node, loaded with its session in one query."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[None, Node] | None:
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        token = bearer_token(header)
        if token is None:
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <agentToken>'.")
        node = Node.objects.select_related("session").filter(agent_token_hash=token_hash(token)).first()
        if node is None:
            raise exceptions.AuthenticationFailed("Unknown agent token.")
        return None, node

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class IsAgent(permissions.BasePermission):
    """Admits only a request authenticated by an agent token."""

    message = "Only node agents may call this endpoint."

    def has_permission(self, request: Request, view: object) -> bool:
        return isinstance(request.auth, Node)
