"""The fleet's part of the OpenAPI description: its error codes, bearer schemes and body shapes.

Imported by fleet/api/views.py, so drf-spectacular sees the extensions before it builds the schema.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import serializers

from core.openapi import error_responses, register_codes

__all__ = ["error_responses"]


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "fleet.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key (manage.py createapikey)."}


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "fleet.api.agent_auth.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A node's agentToken (shown once at creation)."}


# --- the fleet's error codes and the shapes of hand-built bodies ---------------------------------------------------

register_codes(
    {
        "invalid_name": "The name is empty or too long.",
        "invalid_budget": "`disruptionBudget` is not a number in [0, 1] with at most 5 decimals.",
        "invalid_arch": "`arch` is not 1 to 32 of lowercase letters, digits and `_`.",
        "invalid_window": "A `policy.maintenanceWindows` value is malformed; `field` names it "
        "(e.g. `policy.maintenanceWindows[0].start`).",
        "invalid_labels": "A label key or value breaks the label rules, or a node would have more than 64 labels; "
        "`key` names the key at fault. Nothing was changed.",
        "invalid_selector": "The label selector does not parse or is over 4 KiB; `detail` and `position` (a 0-based "
        "character offset) say where.",
        "pool_exists": "The tenant already has a pool of this name.",
        "node_exists": "The tenant already has a node of this name.",
        "unknown_pool": "A pool id is not one of the tenant's pools (for a rollout, `poolIds` lists them).",
        "unknown_node": "`nodeId` is not one of the tenant's nodes.",
        "budget_exhausted": "Starting the workflow would exceed the pool's disruption budget.",
        "workflow_active": "The node already has an active workflow of this kind.",
        "refusal_not_recorded": "The agent's `refused` report could not be recorded (503; nothing was written): "
        "send it again with the next session call.",
        "unknown_scope": "`scopes` names a scope that does not exist (`field`: `scopes`).",
        "scope_too_wide": "`scopes` holds a scope the calling key does not have (`field`: `scopes`).",
        "expiry_in_past": "`expiresAt` is not in the future (`field`: `expiresAt`).",
        "expiry_too_late": "`expiresAt` is later than the calling key's, or past API_KEY_MAX_LIFETIME from now, or "
        "missing where one of them bounds it (`field`: `expiresAt`).",
        "overloaded": "The web process has as many agent-session requests under way as it takes (503, nothing "
        "read or written): retry after `retryAfter` seconds (also the `Retry-After` header), plus a random "
        "fraction of a second.",
    },
    {
        "unknown_pool": {"poolIds": serializers.ListField(child=serializers.CharField(), required=False)},
        "budget_exhausted": {"disrupted": serializers.IntegerField(), "allowed": serializers.IntegerField()},
        "invalid_window": {"field": serializers.CharField(required=False, help_text="The window field at fault.")},
        **{
            code: {"field": serializers.CharField(required=False, help_text="The request field at fault.")}
            for code in ("unknown_scope", "scope_too_wide", "expiry_in_past", "expiry_too_late")
        },
        "overloaded": {"retryAfter": serializers.IntegerField(help_text="Seconds to wait, as in `Retry-After`.")},
        "invalid_labels": {"key": serializers.CharField(required=False, help_text="The label key at fault.")},
        "invalid_selector": {
            "position": serializers.IntegerField(required=False, help_text="Where the selector is wrong.")
        },
    },
)


class DaemonSectionSerializer(serializers.Serializer):
    """A node's desired daemon: what its agent must run."""

    version = serializers.CharField()
    url = serializers.CharField()
    sha256 = serializers.CharField()


class NodeSpecSerializer(serializers.Serializer):
    """A node's desired state."""

    daemon = DaemonSectionSerializer(allow_null=True)


class AgentCommandSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.CharField(help_text="For example `daemon.upgrade`.")
    payload = serializers.DictField()
