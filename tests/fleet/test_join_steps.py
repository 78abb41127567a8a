"""A plug-in's join step (fleet.plugins.JoinStep): its SQL runs in the join's own statement, on a join only, and
what it read reaches it once the join committed; a failure of its Python is the plug-in's, never the agent's, and
a failure of its SQL is the join's (nothing written: the agent retries)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError
from structlog.testing import capture_logs

from fleet import plugins
from fleet.models import NodeSession
from fleet.plugins import JoinStep, register_join_step
from fleet.services.sessions import agent_session_report_for_token
from fleet.tokens import token_hash
from tests.fleet.conftest import make_node, make_pool

pytestmark = pytest.mark.django_db(transaction=True)


class Heard:
    """A step's ``committed`` calls, in order; ``fail``: it raises after recording the call."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        if self.fail:
            raise RuntimeError("the plug-in broke")


@pytest.fixture
def steps() -> Iterator[None]:
    """Steps a test registers (after rollout's own) are removed after it."""
    before = list(plugins._join_steps)
    yield
    plugins._join_steps[:] = before


def step(heard: Heard, ctes: str | None = None, label: str = "test") -> JoinStep:
    """A step that reads the node that joined and the version it reported, back through its columns (named after
    ``label``: two steps' columns never share a name)."""
    return JoinStep(
        ctes=ctes or "test_seen AS (SELECT j.node_id, %(version)s::text AS version FROM joined_node AS j)",
        columns={
            f"{label}_node": "(SELECT node_id FROM test_seen)",
            f"{label}_version": "(SELECT version || %(test_suffix)s FROM test_seen)",
        },
        record=namedtuple(f"{label}_row", [f"{label}_node", f"{label}_version"]),
        params={"test_suffix": "!"},
        committed=heard,
    )


@pytest.fixture
def agent(tenant):
    node, token = make_node(make_pool(tenant))
    return node, token_hash(token)


def join(hashed: str, version: str = "1.0.0"):
    return agent_session_report_for_token(token_hash=hashed, daemon_version=version, protocol_version=3)


def test_a_step_reads_the_join_in_its_statement_and_hears_it_once_committed(steps, agent):
    node, hashed = agent
    heard, other = Heard(), Heard()
    register_join_step(step(heard))
    register_join_step(step(other, "test_other AS (SELECT 1)", label="other"))
    assert join(hashed).joined
    assert heard.calls == [{"node_id": node.id, "daemon_version": "1.0.0", "row": (node.id, "1.0.0!")}]
    assert other.calls == [{"node_id": node.id, "daemon_version": "1.0.0", "row": (node.id, "1.0.0!")}]
    report = join(hashed)  # the session open on that version: the join's statement records a heartbeat
    assert not report.joined
    assert len(heard.calls) == 1  # nothing heard: no join
    assert join(hashed, "1.1.0").joined  # another version: a join
    assert heard.calls[-1] == {"node_id": node.id, "daemon_version": "1.1.0", "row": (node.id, "1.1.0!")}


def test_a_step_that_fails_after_the_commit_is_logged_and_the_join_stands(steps, agent):
    node, hashed = agent
    failing, after = Heard(fail=True), Heard()
    register_join_step(step(failing))
    register_join_step(step(after, "test_other AS (SELECT 1)", label="other"))
    with capture_logs() as logs:
        assert join(hashed).joined
    assert NodeSession.objects.get(node=node).daemon_version == "1.0.0"
    assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == ["fleet.session.receiver_failed"]
    assert len(after.calls) == 1  # the next step is told all the same


def test_a_step_whose_sql_fails_fails_the_join_and_writes_nothing(steps, agent):
    node, hashed = agent
    assert join(hashed, "0.9.0").joined
    before = NodeSession.objects.values().get(node=node)
    heard = Heard()
    register_join_step(step(heard, "test_seen AS (SELECT j.node_id, 1 / 0 AS version FROM joined_node AS j)"))
    with pytest.raises(DatabaseError) as raised:
        join(hashed)
    assert isinstance(raised.value.__cause__, psycopg.errors.DivisionByZero)
    assert NodeSession.objects.values().get(node=node) == before
    assert heard.calls == []


def test_a_step_s_parameter_named_as_the_host_s_does_not_change_the_host_s_statement(steps, agent):
    node, hashed = agent
    heard = Heard()
    register_join_step(
        JoinStep(
            ctes="test_seen AS (SELECT %(version)s::text AS version)",
            columns={"test_version": "(SELECT version FROM test_seen)"},
            record=namedtuple("test_row", ["test_version"]),
            params={"version": "6.6.6"},
            committed=heard,
        )
    )
    assert join(hashed, "1.0.0").joined
    assert NodeSession.objects.get(node=node).daemon_version == "1.0.0"
    assert heard.calls[0]["row"] == ("1.0.0",)  # the host's value
