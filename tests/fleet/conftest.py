"""Factories and fixtures of the fleet tests."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from fleet.models import Node, Pool, Tenant
from fleet.services.nodes import node_create
from fleet.services.pools import pool_create
from fleet.tokens import token_hash


def make_pool(tenant: Tenant, name: str = "gpu-a", budget: str | Decimal = "0.05") -> Pool:
    return pool_create(tenant=tenant, name=name, disruption_budget=Decimal(str(budget)))


def make_node(pool: Pool, name: str | None = None, arch: str = "amd64") -> tuple[Node, str]:
    """A node through the service: returns the node and its plain agent token."""
    return node_create(tenant=pool.tenant, name=name or f"n-{uuid.uuid4().hex[:8]}", pool_id=pool.id, arch=arch)


def make_nodes(pool: Pool, count: int, *, prefix: str = "bulk") -> list[Node]:
    """Many nodes in one INSERT (their agent tokens are unknown: for counting, not for agents)."""
    return Node.objects.bulk_create(
        Node(
            tenant_id=pool.tenant_id,
            pool=pool,
            name=f"{prefix}-{pool.name}-{i:05d}",
            arch="amd64",
            agent_token_hash=token_hash(uuid.uuid4().hex),
        )
        for i in range(count)
    )


def agent_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def pool(tenant) -> Pool:
    return make_pool(tenant)


@pytest.fixture
def disruption_source():
    """Register a disruption source for one test: ``source.nodes`` is the set of node ids it disrupts."""
    from fleet import plugins

    class Source:
        def __init__(self) -> None:
            self.nodes: set = set()

        def __call__(self, pool_id):
            if not self.nodes:
                return Node.objects.none().values("id")  # an empty source must be harmless too
            return Node.objects.filter(pool_id=pool_id, id__in=list(self.nodes)).values("id")

    source = Source()
    plugins.register_disruption_source(source)
    yield source
    plugins._disruption_sources.remove(source)
