from fleet.models.fleet import Command, FleetPulse, Node, NodeSession, Pool, Workflow
from fleet.models.iam import ApiKey, Grant, Membership, Permission, Tenant

__all__ = [
    "ApiKey",
    "Command",
    "FleetPulse",
    "Grant",
    "Membership",
    "Node",
    "NodeSession",
    "Permission",
    "Pool",
    "Tenant",
    "Workflow",
]
