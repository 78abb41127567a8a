"""What the fault scenarios share: their agents and rollout, holding a fault until clients saw it, the errors
the agents met, and the proof every scenario ends with (``assert_rollout_proof``).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from demo.processes import wait_until
from simulator import Fleet, build_agent_configs
from tests.factories import pin
from tests.faults.monitor import Monitor
from tests.faults.stack import FaultStack


def errors_seen(running: Any) -> Counter:
    """A copy of the simulated fleet's error counts, taken from another thread than the fleet's."""
    for _ in range(20):
        with contextlib.suppress(RuntimeError):  # the fleet's loop changed the Counter while we copied it
            return Counter(dict(running.fleet.stats.errors_by_kind))
    return Counter(dict(running.fleet.stats.errors_by_kind))


def answers_seen(running: Any) -> Counter:
    """A copy of the simulated fleet's answers by HTTP status (each try counted: a 503 with Retry-After is waited
    out and sent again, not an error: simulator/retry.py), taken from another thread than the fleet's."""
    for _ in range(20):
        with contextlib.suppress(RuntimeError):  # the fleet's loop changed the Counter while we copied it
            return Counter(dict(running.fleet.stats.answers))
    return Counter(dict(running.fleet.stats.answers))


def server_errors(errors: Counter) -> Counter:
    """Only the 5xx answers (kinds are "<call>_<status>" or "<call>_<ExceptionName>")."""
    return Counter({kind: n for kind, n in errors.items() if kind.rsplit("_", 1)[-1].startswith("5")})


def hold(seconds: float, *, observed: Callable[[], bool], what: str) -> None:
    """Keep a fault on for ``seconds`` and until clients have observed it (the fault's length is the test's
    choice, not a synchronisation: ``observed`` proves the fault was seen)."""
    until = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= until and observed(), timeout=seconds + 30, what=what)


def assert_rollout_proof(stack: FaultStack, monitor: Monitor, running: Any, rollout_ids: list[str]) -> None:
    """What every scenario proves once its rollouts completed (over the monitor's pools and the fleet's agents)."""
    nodes = len(running.fleet.agents)
    assert monitor.violations == [], monitor.violations[:5]
    assert len(monitor.polls) > 20, "the monitor must have watched the run"
    for rollout_id in rollout_ids:
        assert monitor.state(rollout_id) == "completed"
    # Exactly one succeeded upgrade per node, nothing else: no node started twice, none skipped.
    rows = stack.query(
        "SELECT state, reason, count(*) FROM rollout_nodeupgrade WHERE rollout_id = ANY(%s::uuid[])"
        " GROUP BY state, reason",
        (rollout_ids,),
    )
    assert rows == [("succeeded", None, nodes)], rows
    per_node = stack.query(
        "SELECT n.name, count(u.id) FROM fleet_node n JOIN fleet_pool p ON p.id = n.pool_id"
        " LEFT JOIN rollout_nodeupgrade u ON u.node_id = n.id AND u.state = 'succeeded'"
        " WHERE p.name = ANY(%s) GROUP BY n.name HAVING count(u.id) <> 1",
        (sorted(monitor.pools),),
    )
    assert per_node == [], per_node
    # Every agent restarted into the new binary exactly once (and never into anything else).
    upgrades = Counter(len(agent.upgrades) for agent in running.fleet.agents)
    assert upgrades == {1: nodes}, upgrades
    assert {agent.version for agent in running.fleet.agents} == {"1.0.0"}
    assert running.fleet.stats.refusals == 0


def agents_fleet(stack: FaultStack, pools: dict[str, tuple[int, float]], *, seed: int) -> Fleet:
    """Enroll the pools over HTTP and build their agents on 0.9.0 (heartbeat 0.5 s, restart 0.2 s)."""
    enrolled = stack.enroll(pools)
    agents = build_agent_configs([agent for pool in enrolled.values() for agent in pool], daemon_version="0.9.0")
    return Fleet(stack.url, agents, release_pins=[pin(0)], heartbeat_seconds=0.5, restart_delay=0.2, seed=seed)


def pool_id(stack: FaultStack, name: str) -> str:
    return str(stack.query("SELECT id FROM fleet_pool WHERE name = %s", (name,))[0][0])


def report(title: str, **numbers: Any) -> None:
    """Print what a fault did (the numbers docs/operations.md quotes): `pytest -s` or the captured output."""
    print(
        f"\n[faults] {title}: "
        + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in numbers.items())
    )


def create_two_wave_rollout(stack: FaultStack, pools: Iterable[str]) -> str:
    """The scenarios' rollout over ``pools``: a 10 % wave then the rest, short soak, 60 s timeout."""
    return stack.create(
        version="1.0.0",
        poolIds=[pool_id(stack, name) for name in pools],
        waves=[10, 100],
        soakSeconds=1,
        upgradeTimeoutSeconds=60,
        maxFailureRatio=0.1,
    )


def wait_last_wave(monitor: Monitor, rollout: str, *, succeeded: int) -> None:
    """Until the rollout's last wave is under way: ``succeeded`` nodes done (the first wave's and more)."""
    monitor.wait(
        lambda poll: poll.counts.get(rollout, {}).get("succeeded", 0) >= succeeded,
        timeout=90,
        what="the last wave to be under way",
    )
