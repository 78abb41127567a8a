"""How the rollout module plugs into the host fleet (connected in RolloutConfig.ready)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import QuerySet

from fleet.interface import (
    node_session_reported,
    register_daemon_resolver,
    register_disruption_source,
)
from rollout.models import NodeUpgrade


def upgrades_disrupting(pool_id: UUID) -> QuerySet:
    """Disruption source: nodes of a pool that a rollout upgrade disrupts (``NodeUpgrade.objects.disrupting``)."""
    return NodeUpgrade.objects.disrupting([pool_id])


def daemon_section_for(version: str, arch: str) -> dict | None:
    from rollout.services.releases import daemon_section

    return daemon_section(version=version, arch=arch)


def on_node_session_reported(sender: Any, *, node_id: UUID, daemon_version: str, **kwargs: Any) -> None:
    """A node that joins or reports a new version settles its in-flight upgrade at once."""
    from rollout.services.settle import node_upgrade_settle_reported

    node_upgrade_settle_reported(node_id=node_id, daemon_version=daemon_version)


def connect() -> None:
    register_disruption_source(upgrades_disrupting)
    register_daemon_resolver(daemon_section_for)
    node_session_reported.connect(on_node_session_reported, dispatch_uid="rollout.settle_on_join")
