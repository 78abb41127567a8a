"""Watching a fault test's private database: a ``Monitor`` thread polls it with plain SQL (and survives its
outages) while the rollout runs, and checks the disruption budget at every poll (docs/controller.md#the-tick,
what counts as disrupted).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psycopg

from demo.processes import wait_until
from fleet.services.budget import budget_allowed

BUDGET_SQL = """
SELECT p.name, p.disruption_budget, count(n.id) AS nodes,
       count(n.id) FILTER (WHERE
           EXISTS (SELECT 1 FROM fleet_workflow w WHERE w.node_id = n.id AND w.state = 'active')
        OR EXISTS (SELECT 1 FROM rollout_nodeupgrade u WHERE u.node_id = n.id AND u.state = 'in_flight')
        OR EXISTS (SELECT 1 FROM rollout_nodeupgrade u WHERE u.node_id = n.id AND u.state = 'failed'
                   AND NOT EXISTS (SELECT 1 FROM fleet_nodesession s
                                   WHERE s.node_id = n.id AND s.left_at IS NULL AND s.last_seen_at > u.settled_at))
       ) AS disrupted
FROM fleet_pool p JOIN fleet_node n ON n.pool_id = p.id
GROUP BY p.id, p.name, p.disruption_budget
"""
ROLLOUTS_SQL = """
SELECT r.id::text, r.state, u.state, count(u.id), count(u.started_at)
FROM rollout_rollout r LEFT JOIN rollout_nodeupgrade u ON u.rollout_id = r.id
GROUP BY r.id, r.state, u.state
"""


@dataclass
class Poll:
    at: float  # time.monotonic()
    rollouts: dict[str, str]  # id -> state
    counts: dict[str, Counter]  # id -> {node upgrade state: n}
    started: int  # node upgrades ever started (started_at set), all rollouts


class Monitor:
    """Polls the private database every ``interval`` s from a thread; an unreachable database is a failed poll.

    At every poll, each pool's disrupted nodes (docs/controller.md#the-tick: an active workflow, an upgrade in
    flight, or a failed upgrade whose node has not been online since) must stay within ceil(budget x nodes).
    """

    def __init__(self, url: str, *, pools: Iterable[str], interval: float = 0.1):
        self.url = url
        self.pools = set(pools)
        self.interval = interval
        self.polls: list[Poll] = []
        self.failed_polls = 0
        self.violations: list[str] = []
        self.peak: dict[str, tuple[int, int]] = {}  # pool -> (most disrupted seen, allowed)
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fault-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        wait_until(lambda: bool(self.polls), timeout=30, what="the monitor's first poll")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._halt.set()
        self._thread.join(10)

    def _main(self) -> None:
        conn: psycopg.Connection | None = None
        while not self._halt.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=1)
                self._poll(conn)
            except psycopg.Error:
                self.failed_polls += 1
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
            self._halt.wait(self.interval)
        if conn is not None:
            conn.close()

    def _poll(self, conn: psycopg.Connection) -> None:
        with conn.transaction():  # one snapshot for both reads
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            budgets = conn.execute(BUDGET_SQL).fetchall()
            rows = conn.execute(ROLLOUTS_SQL).fetchall()
        at = time.monotonic()
        for pool, budget, nodes, disrupted in budgets:
            if pool not in self.pools:  # another test's pools, on the shared system
                continue
            allowed = budget_allowed(budget=budget, nodes=nodes)
            most, _ = self.peak.get(pool, (0, allowed))
            self.peak[pool] = (max(most, disrupted), allowed)
            if disrupted > allowed:
                self.violations.append(f"pool {pool}: {disrupted} disrupted > {allowed} allowed")
        rollouts: dict[str, str] = {}
        counts: dict[str, Counter] = {}
        started = 0
        for rollout_id, state, upgrade_state, n, n_started in rows:
            rollouts[rollout_id] = state
            counts.setdefault(rollout_id, Counter())
            if upgrade_state is not None:
                counts[rollout_id][upgrade_state] += n
            started += n_started
        self.polls.append(Poll(at=at, rollouts=rollouts, counts=counts, started=started))

    # -- reading what was seen --------------------------------------------------------------------

    @property
    def last(self) -> Poll:
        return self.polls[-1]

    def state(self, rollout_id: str) -> str | None:
        return self.last.rollouts.get(rollout_id)

    def count(self, rollout_id: str, state: str) -> int:
        return self.last.counts.get(rollout_id, Counter())[state]

    def first(self, predicate: Callable[[Poll], bool], *, after: float) -> float | None:
        """When (monotonic) a poll taken after ``after`` first satisfied ``predicate``."""
        return next((poll.at for poll in self.polls if poll.at >= after and predicate(poll)), None)

    def wait(self, predicate: Callable[[Poll], bool], *, timeout: float, what: str) -> float:
        """Wait for a (fresh) poll satisfying ``predicate``; returns its time."""
        since = time.monotonic()
        wait_until(lambda: self.first(predicate, after=since) is not None, timeout=timeout, what=what)
        return self.first(predicate, after=since)  # type: ignore[return-value]
