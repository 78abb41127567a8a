"""A fleet like a real one for the console's Chromium tests (issue 51): 120 nodes in five pools with long names
and several labels each, 24 rollouts (most of them over, one running with gates that answered, one paused, one
scheduled, one awaiting a second approval), long versions and comments. Written through the services, as the
API would, except the gates' results (the evaluation task's rows, written as it writes them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from fleet.models import Node, NodeSession, Pool, Tenant
from fleet.services.iam import tenant_set_rollout_approvals
from rollout.controller.tick import rollout_tick
from rollout.models import Release, Rollout, RolloutGate
from rollout.rollouts.actions import rollout_abort, rollout_pause
from rollout.rollouts.approvals import rollout_approve
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet, manifest, release_stored

PASSWORD = "correct horse battery"
# Six pools, 20 nodes each (120), names as long as a data centre's; the last one free for a plan.
POOLS = {
    "gpu-h100-eu-west-3b-training": (20, "0.1"),
    "gpu-a100-us-east-1a-inference": (20, "0.25"),
    "cpu-epyc-eu-central-1c-batch-jobs": (20, "0.2"),
    "edge-arm64-ap-southeast-2-cache": (20, "0.5"),
    "storage-nvme-eu-west-3a-ceph-osd": (20, "0.1"),
    "spare-gpu-h100-eu-west-3b-burst": (20, "0.2"),
}
LONG_VERSION = "1.4.0-rc.12+build.20261207.4f9c2ab"


@dataclass
class Realistic:
    tenant: Tenant
    running: Rollout
    paused: Rollout
    awaiting: Rollout
    scheduled: Rollout
    release: Release
    node: Node
    free_pool: Pool


def labels_for(pool: str, i: int) -> dict[str, str]:
    zone = "-".join(pool.split("-")[2:5])
    return {
        "zone": zone,
        "rack": f"r{i % 7 + 10}",
        "ring": "canary" if i % 12 == 0 else "main",
        "team": "ml-platform-infrastructure" if pool.startswith("gpu") else "core-services",
        "hardware.example.com/generation": f"gen{i % 3 + 4}",
    }


def realistic_fleet(tenant: Tenant) -> Realistic:
    """Build the fleet and its rollouts in ``tenant`` (the ``releases`` fixture registered 0.9.0 and 1.0.0)."""
    user_model = get_user_model()
    operator = user_model.objects.create_superuser("operator", "op@example.com", PASSWORD)
    reviewer = user_model.objects.create_superuser("reviewer-with-a-long-name", "rv@example.com", PASSWORD)
    nodes = fleet(tenant, POOLS)
    for pool, members in nodes.items():
        for i, node in enumerate(members):
            node.name = f"{pool}-rack{i % 7 + 10}-node-{i:05d}"
            node.labels = labels_for(pool, i)
        Node.objects.bulk_update(members, ["name", "labels"])
    # One node in ten has gone: its agent left an hour ago.
    NodeSession.objects.filter(node__name__endswith="5").update(left_at=timezone.now() - timedelta(hours=1))
    release = release_stored(manifest(LONG_VERSION, 3))
    pools = {pool.name: pool for pool in Pool.objects.filter(tenant=tenant)}
    names = list(POOLS)

    def create(version: str, pool_names: list[str], **options) -> Rollout:
        spec = rollout_spec(version=version, pool_ids=[str(pools[name].id) for name in pool_names], **options)
        return rollout_create(tenant=tenant, spec=spec, created_by=operator)

    # 20 rollouts over: created and aborted (some with rollback), each over two or three pools.
    for i in range(20):
        done = create(LONG_VERSION if i % 2 else "1.0.0", names[i % 5 : i % 5 + 2] or names[:2], waves=[5, 25, 50, 100])
        rollout_tick(rollout_id=done.id)
        rollout_abort(rollout_id=done.id, rollback=i % 3 == 0)
    running = create(LONG_VERSION, names[:2], waves=[5, 10, 25, 50, 75, 100], soak_seconds=605015)
    rollout_tick(rollout_id=running.id)
    now = timezone.now()
    RolloutGate.objects.bulk_create(
        [
            RolloutGate(
                rollout=running,
                position=0,
                name="error-rate-of-the-inference-frontends",
                kind=RolloutGate.Kind.PROMETHEUS,
                query='sum(rate(http_requests_total{job="inference-frontend",code=~"5.."}[5m])) '
                '/ sum(rate(http_requests_total{job="inference-frontend"}[5m]))',
                maximum=0.01,
                state=RolloutGate.State.PASS,
                value=0.0042,
                at=now,
                fresh_until=now + timedelta(minutes=2),
                due_at=now + timedelta(minutes=1),
            ),
            RolloutGate(
                rollout=running,
                position=1,
                name="status-page",
                kind=RolloutGate.Kind.HTTP,
                url="https://status.example.com/api/v2/components/training-cluster-eu-west-3b/health",
                state=RolloutGate.State.FAIL,
                value=503,
                detail="HTTP 503 from status.example.com",
                at=now,
                consecutive_failures=2,
                due_at=now + timedelta(minutes=1),
            ),
        ]
    )
    paused = create("1.0.0", [names[2]], waves=[10, 100], max_failure_ratio=0.1)
    rollout_tick(rollout_id=paused.id)
    rollout_pause(rollout_id=paused.id)
    scheduled = create(LONG_VERSION, [names[3]], waves=[50, 100], start_at=(now + timedelta(days=2)).isoformat())
    tenant_set_rollout_approvals(tenant=tenant, approvals=2)
    awaiting = create(LONG_VERSION, [names[4]], waves=[20, 100])
    rollout_approve(
        rollout_id=awaiting.id,
        user=reviewer,
        comment="Checked the canary ring's dashboards for the whole weekend; nothing above the usual error rate.",
    )
    node = Node.objects.get(name=f"{names[0]}-rack10-node-00000")
    return Realistic(tenant, running, paused, awaiting, scheduled, release, node, pools[names[5]])
