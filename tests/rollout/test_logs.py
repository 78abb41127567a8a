"""Every rollout transition, node start and settle is also one structured (JSON) log line.

See docs/controller.md#events-and-logs.
"""

import json
import logging
import logging.config

import pytest
from django.conf import settings

from rollout.rollouts.actions import rollout_abort, rollout_pause, rollout_resume
from rollout.rollouts.create import rollout_create
from rollout.rollouts.spec import rollout_spec
from tests.factories import fleet
from tests.rollout.helpers import in_flight, rejoin, tick

pytestmark = pytest.mark.django_db


@pytest.fixture
def json_lines():
    """The JSON lines the project's own log formatter writes, as dicts."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("rollout")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    formatter = logging.config.dictConfigClass(settings.LOGGING).configure_formatter(
        settings.LOGGING["formatters"]["json"]
    )
    try:
        yield lambda: [json.loads(formatter.format(record)) for record in records]
    finally:
        logger.removeHandler(handler)


def test_transitions_and_node_starts_and_settles_are_json_lines(tenant, releases, json_lines):
    fleet(tenant, {"a": (2, "1")})
    rollout = rollout_create(tenant=tenant, spec=rollout_spec(version="1.0.0", waves=[100], soak_seconds=0))
    tick(rollout)
    first, _ = in_flight(rollout)
    rejoin(first.node_id, "1.0.0")
    rollout_pause(rollout_id=rollout.id)
    rollout_resume(rollout_id=rollout.id)
    rollout_abort(rollout_id=rollout.id)
    lines = json_lines()
    events = [line["event"] for line in lines]
    for kind in ("rollout.created", "node_upgrade.started", "node_upgrade.succeeded", "rollout.paused",
                 "rollout.resumed", "rollout.aborted"):  # fmt: skip
        assert kind in events, kind
    created = next(line for line in lines if line["event"] == "rollout.created")
    assert created["rollout"] == str(rollout.id)
    assert created["tenant"] == tenant.id
    assert created["version"] == "1.0.0"
    assert created["level"] == "info"
    assert created["timestamp"]
    started = [line for line in lines if line["event"] == "node_upgrade.started"]
    # Starts are logged per batch (each line names its nodes): every started node is in one line.
    assert {node for line in started for node in line["nodes"]} == {str(u.node_id) for u in rollout.node_upgrades.all()}
