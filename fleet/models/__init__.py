from fleet.models.audit import AuditEntry
from fleet.models.fleet import Command, FleetPulse, Node, NodeSession, Pool, Workflow
from fleet.models.iam import ApiKey, Grant, Membership, Permission, Scope, Tenant

__all__ = [
    "ApiKey",
    "AuditEntry",
    "Command",
    "FleetPulse",
    "Grant",
    "Membership",
    "Node",
    "NodeSession",
    "Permission",
    "Pool",
    "Scope",
    "Tenant",
    "Workflow",
]
