"""Node agents authenticate with their node's agentToken: ``Authorization: Bearer <agentToken>``.

The agent API uses only these classes (never ApiKeyAuthentication or FleetAdmin):
a token reaches only its own node, and an API key is not an agent token.
"""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.request import Request

from fleet.api.authentication import BearerAuthentication
from fleet.models import Node
from fleet.services.sessions import agent_node
from fleet.tokens import token_hash


class AgentTokenAuthentication(BearerAuthentication):
    """``request.auth`` is the Node, loaded with its session in one query."""

    credential = "agentToken"
    unknown_message = "Unknown agent token."

    def lookup(self, token: str) -> tuple[None, Node] | None:
        node = agent_node(token_hash=token_hash(token))
        return None if node is None else (None, node)


class IsAgent(permissions.BasePermission):
    """Admits only a request authenticated by an agent token."""

    message = "Only node agents may call this endpoint."

    def has_permission(self, request: Request, view: object) -> bool:
        return isinstance(request.auth, Node)
