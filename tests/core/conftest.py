"""Objects behind every endpoint that takes a body: a pool, a node with its agent token, a command, a rollout."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from fleet.models import Command, Node, Pool, Workflow
from fleet.services.commands import command_enqueue
from fleet.services.workflows import workflow_start
from rollout.models import Rollout
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet, manifest, release_stored, rollout_settings
from tests.fleet.conftest import agent_client, make_node


@dataclass
class World:
    api: APIClient
    agent: APIClient
    pool: Pool
    node: Node
    command: Command
    workflow: Workflow
    rollout: Rollout

    def url(self, template: str) -> str:
        return template.format(
            pool=self.pool.id,
            node=self.node.id,
            command=self.command.id,
            workflow=self.workflow.id,
            rollout=self.rollout.id,
        )

    def client(self, who: str) -> APIClient:
        return self.agent if who == "agent" else self.api


@pytest.fixture
def world(api, tenant, settings, tmp_path) -> World:
    settings.ROLLOUT = rollout_settings()
    settings.MEDIA_ROOT = tmp_path / "media"
    pools = fleet(tenant, {"gpu-a": (4, "1")})
    pool = pools["gpu-a"][0].pool
    node, token = make_node(pool, "agent-node")
    upgrade = {"version": "1.5.0", "url": "https://dl.example/bcd/1.5.0/linux-amd64", "sha256": "b" * 64}
    command = command_enqueue(node_id=node.id, kind="daemon.upgrade", payload=upgrade)
    workflow = workflow_start(tenant=tenant, node_id=pools["gpu-a"][0].id, kind="remediation")
    release_stored(manifest("0.9.0", 1))
    release_stored(manifest("1.0.0", 2, archs=("amd64",)))
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0"))
    return World(
        api=api,
        agent=agent_client(token),
        pool=pool,
        node=node,
        command=command,
        workflow=workflow,
        rollout=rollout,
    )
