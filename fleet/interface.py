"""The host fleet's one public interface: everything a plug-in app (``rollout``) may use.

A plug-in imports the host only from here (the import contract in pyproject.toml
enforces it). It reads fleet models (Tenant, Pool, Node, NodeSession, Command),
calls these services, registers its hooks (fleet/plugins.py), builds its
admin on the host's tenant-scoped admin classes and its agent endpoints on the
host's agent-token authentication. It never writes fleet rows any other way.
"""

from fleet.admin_base import (
    ReadOnlyMixin,
    TenantScopedAdmin,
    budget_percent,
    can_approve,
    in_tenant_scope,
    is_fleet_admin,
    staff_user,
    tenant_id_of,
)
from fleet.api.agent_auth import AgentTokenAuthentication, IsAgent
from fleet.api.permissions import FleetAdminOrApprover, RolloutApprover
from fleet.models import Command, Node, NodeSession, Pool, Scope, Tenant
from fleet.plugins import (
    JoinStep,
    QuickAnswer,
    node_daemon_refused,
    node_session_reported,
    register_admin_notices,
    register_admin_overview,
    register_daemon_resolver,
    register_disruption_source,
    register_join_step,
    register_node_links,
    register_quick_answers,
    register_refusal_codes,
    register_session_fields,
)
from fleet.selectors import Selector
from fleet.services.audit import Actor, audit_record, changed_fields
from fleet.services.budget import PoolBudget, pool_budget, pool_budgets
from fleet.services.commands import commands_cancel, commands_enqueue
from fleet.services.iam import Principal
from fleet.services.labels import selector_q, selector_validate
from fleet.services.liveness import offline_verdicts_trusted
from fleet.services.nodes import node_tables_vacuum, nodes_set_daemon, online_node_q
from fleet.services.pools import (
    PoolWindows,
    pool_windows,
    pool_windows_at,
    pool_windows_open,
    pools_set_default_daemon_version,
    tenant_slugs,
)
from fleet.windows import MaintenanceWindow, finish_after_open_seconds, next_opening

__all__ = [
    "Actor",
    "AgentTokenAuthentication",
    "Command",
    "FleetAdminOrApprover",
    "IsAgent",
    "JoinStep",
    "MaintenanceWindow",
    "Node",
    "NodeSession",
    "Pool",
    "PoolBudget",
    "PoolWindows",
    "Principal",
    "QuickAnswer",
    "ReadOnlyMixin",
    "RolloutApprover",
    "Scope",
    "Selector",
    "Tenant",
    "TenantScopedAdmin",
    "audit_record",
    "budget_percent",
    "can_approve",
    "changed_fields",
    "commands_cancel",
    "commands_enqueue",
    "finish_after_open_seconds",
    "in_tenant_scope",
    "is_fleet_admin",
    "next_opening",
    "node_daemon_refused",
    "node_session_reported",
    "node_tables_vacuum",
    "nodes_set_daemon",
    "offline_verdicts_trusted",
    "online_node_q",
    "pool_budget",
    "pool_budgets",
    "pool_windows",
    "pool_windows_at",
    "pool_windows_open",
    "pools_set_default_daemon_version",
    "register_admin_notices",
    "register_admin_overview",
    "register_daemon_resolver",
    "register_disruption_source",
    "register_join_step",
    "register_node_links",
    "register_quick_answers",
    "register_refusal_codes",
    "register_session_fields",
    "selector_q",
    "selector_validate",
    "staff_user",
    "tenant_id_of",
    "tenant_slugs",
]
