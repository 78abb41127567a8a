"""Everything the rollout module uses from the host fleet, in one place.

The module reads fleet models (Pool, Node, NodeSession) and calls these
services; it never writes fleet rows any other way.
"""

from project.fleet.interface import (
    node_session_reported,
    register_daemon_resolver,
    register_disruption_source,
)
from project.fleet.models import Command, Node, NodeSession, Pool
from project.fleet.services.budget import PoolBudget, pool_budget, pool_budgets
from project.fleet.services.commands import commands_enqueue
from project.fleet.services.nodes import nodes_set_daemon, online_node_q
from project.fleet.services.pools import pools_set_default_daemon_version

__all__ = [
    "Command",
    "Node",
    "NodeSession",
    "Pool",
    "PoolBudget",
    "commands_enqueue",
    "node_session_reported",
    "nodes_set_daemon",
    "online_node_q",
    "pool_budget",
    "pool_budgets",
    "pools_set_default_daemon_version",
    "register_daemon_resolver",
    "register_disruption_source",
]
