"""How the rollout module plugs into the host fleet (connected in RolloutConfig.ready)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from django.utils import timezone

from fleet.interface import (
    JoinStep,
    QuickAnswer,
    node_daemon_refused,
    register_admin_notices,
    register_daemon_resolver,
    register_disruption_source,
    register_join_step,
    register_node_links,
    register_quick_answers,
    register_refusal_codes,
    register_session_fields,
)
from rollout.controller.statements import (
    SETTLE_ON_JOIN_COLUMNS,
    SETTLE_ON_JOIN_CTES,
    SETTLE_ON_JOIN_PARAMS,
    SettleOnJoin,
)
from rollout.models import NodeUpgrade
from rollout.release.agent import REFUSAL_CODES


def upgrades_disrupting(pool_id: UUID) -> QuerySet:
    """Disruption source: nodes of a pool that a rollout upgrade disrupts (``NodeUpgrade.objects.disrupting``)."""
    return NodeUpgrade.objects.disrupting([pool_id])


def daemon_section_for(version: str, arch: str) -> dict | None:
    """Daemon resolver: the section of a registered version (a node created in a pool with a default).

    Not an expired release (docs/signing.md#expiry): no node is sent one; such a node starts with no daemon
    section, as in a pool without a default, and the next rollout or convergence upgrades it.
    """
    from rollout.controller.daemons import registered_daemon_section

    section = registered_daemon_section(version=version, arch=arch, unexpired_at=timezone.now())
    return section if section is not None and section["url"] is not None else None


def on_node_joined(*, node_id: UUID, daemon_version: str, row: SettleOnJoin) -> None:
    """A node that joins or reports a new version settles its in-flight upgrade at once: in the join's own
    statement (``SETTLE_ON_JOIN``), which has committed; the rest here (controller/settle.py)."""
    from rollout.controller.settle import node_upgrade_settle_reported

    node_upgrade_settle_reported(node_id=node_id, daemon_version=daemon_version, row=row)


SETTLE_ON_JOIN = JoinStep(
    ctes=SETTLE_ON_JOIN_CTES,
    columns=SETTLE_ON_JOIN_COLUMNS,
    record=SettleOnJoin,
    params=SETTLE_ON_JOIN_PARAMS,
    committed=on_node_joined,
)


def on_node_daemon_refused(
    sender: Any, *, node_id: UUID, version: str, code: str, detail: str, at: datetime, **kwargs: Any
) -> None:
    """A node's agent refused the release it was sent: its upgrade fails at once and its spec goes back."""
    from rollout.controller.refusals import node_upgrade_settle_refused

    node_upgrade_settle_refused(node_id=node_id, version=version, code=code, detail=detail, at=at)


def session_fields() -> dict[str, Any]:
    """Every session answer carries the newest root's version, so that agents follow the chain."""
    from rollout.registry.roots import root_version_cached

    return {"rootVersion": root_version_cached()}


def node_links(node_id: UUID) -> list[tuple[str, str]]:
    """The node's admin page links to its current rollout (the one its upgrade claims it for) and its history."""
    from django.urls import reverse

    from rollout.admin.display import rollout_label

    links = []
    current = NodeUpgrade.objects.filter(node_id=node_id, claims_node=True).select_related("rollout__release").first()
    if current is not None:
        rollout = current.rollout
        url = reverse("admin:rollout_rollout_change", args=[rollout.pk])
        links.append((f"current rollout: {rollout_label(rollout)} ({rollout.state}, this node {current.state})", url))
    history = reverse("admin:rollout_nodeupgrade_changelist")
    links.append(("upgrade history", f"{history}?node__id__exact={node_id}"))
    return links


def admin_notices(request: Any) -> None:
    """The admin's front page says so when no controller is running, as the rollouts' pages do."""
    from django.contrib import admin

    from rollout.admin.rollouts import RolloutAdmin
    from rollout.models import Rollout

    model_admin = admin.site.get_model_admin(Rollout)
    if isinstance(model_admin, RolloutAdmin) and model_admin.has_view_permission(request):
        model_admin.controller_banner(request)


def download_quick_answer(method: str, path: str, headers: Mapping[str, str]) -> QuickAnswer | None:
    """A download of a binary this process served before, answered by the async front (api/download_answers.py)."""
    from rollout.api.download_answers import download_quick_answer as answer

    return answer(method, path, headers)


def connect() -> None:
    register_disruption_source(upgrades_disrupting)
    register_daemon_resolver(daemon_section_for)
    register_refusal_codes(REFUSAL_CODES)
    register_session_fields(session_fields)
    register_node_links(node_links)
    register_quick_answers(download_quick_answer)
    register_admin_notices(admin_notices)
    register_join_step(SETTLE_ON_JOIN)
    node_daemon_refused.connect(on_node_daemon_refused, dispatch_uid="rollout.settle_on_refusal")
