"""A fleet too large for one event loop: its agents split over child processes, one ``Fleet`` each.

One asyncio loop drives about 300-400 heartbeats/s on one core (docs/simulator.md); past that,
or when the loop shares its core with the server under test, the client's own queueing shows up
in the latencies it reports. ``ShardedFleet`` runs ``processes`` children (spawned, not forked:
the parent may hold database connections and threads), each a ``Fleet`` over its slice of the
agents, and aggregates what they report every ``report_every`` seconds:

    with ShardedFleet(base_url, configs, processes=2, heartbeat_seconds=30).start(timeout=900) as fleet:
        fleet.wait_for(lambda f: f.online_count() == len(configs), timeout=120)
        print(fleet.status_line(), fleet.stats.heartbeats)

Observation (``online_count``, ``versions``, ``states``, ``stats``, ``status_line``) is at most
one report old; ``stats.latencies`` and ``stats.round_trips`` are the children's, concatenated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from simulator.config import AgentConfig
from simulator.stats import FleetStats, FleetStatus

# FleetStats' counters (its int and float fields): what each child sends and the parent sums.
COUNTERS = tuple(f.name for f in dataclasses.fields(FleetStats) if f.type in ("int", "float"))


@dataclass
class ShardReport:
    """What one child last said: its agents' state, its counters, the latencies since its last report."""

    online: int = 0
    versions: Counter = field(default_factory=Counter)
    states: Counter = field(default_factory=Counter)
    counters: dict[str, float] = field(default_factory=dict)
    errors_by_kind: Counter = field(default_factory=Counter)
    answers: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    round_trips: list[float] = field(default_factory=list)
    finished: bool = False
    error: str | None = None


def _child_main(conn: Connection, base_url: str, configs: list[AgentConfig], options: dict[str, Any]) -> None:
    """A child process: one Fleet until the parent says stop (or closes the pipe); reports as it runs."""
    import asyncio
    import signal

    from simulator.fleet import Fleet

    # The parent decides when to stop and tells this child (a Ctrl-C, or a SIGTERM to the process
    # group, reaches every process): the agents then stop as the parent's options say.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    report_every = options.pop("report_every")
    timeout = options.pop("timeout")
    try:
        fleet = Fleet(base_url, configs, **options)
    except Exception as exc:  # a bad option: the parent raises it
        conn.send(ShardReport(finished=True, error=f"{type(exc).__name__}: {exc}"))
        conn.close()
        return
    sent_latencies = sent_round_trips = 0
    reported_at = 0.0

    def report(*, finished: bool = False, error: str | None = None) -> None:
        nonlocal sent_latencies, sent_round_trips
        stats = fleet.stats
        latencies, round_trips = stats.latencies[sent_latencies:], stats.round_trips[sent_round_trips:]
        sent_latencies += len(latencies)
        sent_round_trips += len(round_trips)
        online, versions, states = fleet.census()
        conn.send(
            ShardReport(
                online=online,
                versions=versions,
                states=states,
                counters={name: getattr(stats, name) for name in COUNTERS},
                errors_by_kind=Counter(stats.errors_by_kind),
                answers=Counter(stats.answers),
                latencies=latencies,
                round_trips=round_trips,
                finished=finished,
                error=error,
            )
        )

    def until(_: Fleet) -> bool:
        # Called on the fleet's loop between agent steps: a consistent snapshot, no locks needed.
        nonlocal reported_at
        now = time.monotonic()
        try:
            if now - reported_at >= report_every:
                reported_at = now
                report()
            return conn.poll()  # any message from the parent means stop
        except (EOFError, OSError):  # BrokenPipeError included
            return True  # the parent is gone

    error = None
    try:
        asyncio.run(fleet.run(until=until, timeout=timeout, poll=min(0.5, report_every)))
    except Exception as exc:  # reported to the parent, which raises it
        error = f"{type(exc).__name__}: {exc}"
    with contextlib.suppress(BrokenPipeError, OSError):  # the parent stopped listening
        report(finished=True, error=error)
    conn.close()


class ShardedFleet(FleetStatus):
    """``processes`` child processes of simulated agents (a ``Fleet`` each), observed from here.

    ``fleet_options`` are ``Fleet``'s keyword arguments (``heartbeat_seconds``, ``restart_delay``,
    ``record_latencies``, ``start_spread``, ...); every child gets them all, and its own slice of
    ``agents`` (every ``processes``-th agent, so pools and failure shares spread evenly).
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        agents: Sequence[AgentConfig],
        *,
        processes: int = 2,
        report_every: float = 0.5,
        **fleet_options: Any,
    ):
        if processes < 1:
            raise ValueError("processes must be at least 1")
        # Several addresses of one server: child i connects to the i-th (round robin). One source address reaches
        # one server address and port over at most ~64,000 connections (the ephemeral ports).
        self.base_urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.slices = [list(agents[i::processes]) for i in range(min(processes, len(agents)) or 1)]
        self.agent_count = len(agents)
        self.report_every = report_every
        self.fleet_options = fleet_options
        self.reports = [ShardReport() for _ in self.slices]
        self.stats = FleetStats()
        self.started_at: float | None = None
        self._lock = threading.Lock()
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._connections: list[Connection] = []
        self._readers: list[threading.Thread] = []

    # -- running ---------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> ShardedFleet:
        """Spawn the children; each stops by itself after ``timeout`` seconds (None: when told)."""
        context = multiprocessing.get_context("spawn")
        self.started_at = time.monotonic()
        try:
            for index, configs in enumerate(self.slices):
                parent_end, child_end = context.Pipe()
                self._connections.append(parent_end)
                options = {**self.fleet_options, "report_every": self.report_every, "timeout": timeout}
                options["seed"] = options.get("seed", 0) * 1000 + index
                process = context.Process(
                    target=_child_main,
                    args=(child_end, self.base_urls[index % len(self.base_urls)], configs, options),
                    name=f"simulated-agents-{index}",
                    daemon=True,
                )
                process.start()
                self._processes.append(process)
                child_end.close()
                reader = threading.Thread(target=self._read, args=(index, parent_end), daemon=True)
                reader.start()
                self._readers.append(reader)
        except BaseException:
            with contextlib.suppress(RuntimeError):  # what failed here is the error to see
                self.stop(timeout=5.0)
            raise
        return self

    def _read(self, index: int, conn: Connection) -> None:
        """This thread's child's reports, until its last one (or its pipe closes: it died)."""
        while True:
            try:
                report: ShardReport = conn.recv()
            except Exception as exc:  # EOFError, OSError: the child is gone without its last report
                with self._lock:
                    last = self.reports[index]
                    last.finished = True
                    last.error = last.error or f"simulator process {index} ended without its last report ({exc!r})"
                return
            with self._lock:
                self.stats.latencies.extend(report.latencies)
                self.stats.round_trips.extend(report.round_trips)
                report.latencies, report.round_trips = [], []
                self.reports[index] = report
                self._aggregate()
            if report.finished:
                return

    def _aggregate(self) -> None:
        for name in COUNTERS:
            setattr(self.stats, name, sum(r.counters.get(name, 0) for r in self.reports))
        self.stats.errors_by_kind = sum((r.errors_by_kind for r in self.reports), Counter())
        self.stats.answers = sum((r.answers for r in self.reports), Counter())

    def finished(self) -> bool:
        """Has every child ended (its timeout passed, or it stopped)?"""
        with self._lock:
            return all(r.finished for r in self.reports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    def stop(self, timeout: float = 20.0) -> None:
        """Tell every child to stop, wait for its last report, and raise if one crashed."""
        for conn in self._connections:
            with contextlib.suppress(BrokenPipeError, OSError):  # already gone
                conn.send("stop")
        deadline = time.monotonic() + timeout
        for process in self._processes:
            process.join(max(0.1, deadline - time.monotonic()))
        for reader in self._readers:
            reader.join(max(0.1, deadline - time.monotonic()))
        stuck = [p for p in self._processes if p.is_alive()]
        for process in stuck:
            process.kill()
            process.join(5.0)
        for conn in self._connections:
            conn.close()
        if stuck:
            raise RuntimeError(f"{len(stuck)} simulator process(es) did not stop in time")
        self._raise_if_crashed()

    def _raise_if_crashed(self) -> None:
        errors = [r.error for r in self.reports if r.error]
        dead = [p for p in self._processes if p.exitcode not in (None, 0)]
        if errors or dead:
            raise RuntimeError(
                "a simulator process crashed: "
                + "; ".join(errors or [f"{p.name} exit code {p.exitcode}" for p in dead])
            )

    def __enter__(self) -> ShardedFleet:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if exc_type is None:
            self.stop()
            return
        # The block's own exception is the one to see; the children are stopped all the same.
        with contextlib.suppress(RuntimeError):
            self.stop()

    def wait_for(self, predicate: Callable[[ShardedFleet], bool], timeout: float, *, poll: float = 0.25) -> bool:
        """Poll ``predicate(self)`` until it holds (True) or ``timeout`` passes or every child ended (False)."""
        deadline = time.monotonic() + timeout
        while True:
            self._raise_if_crashed()
            if predicate(self):
                return True
            if time.monotonic() >= deadline or self.finished():
                self._raise_if_crashed()
                return predicate(self)
            time.sleep(poll)

    # -- observation (as of the last reports) ----------------------------------------------

    def online_count(self) -> int:
        with self._lock:
            return sum(r.online for r in self.reports)

    def versions(self) -> Counter:
        with self._lock:
            return sum((r.versions for r in self.reports), Counter())

    def states(self) -> Counter:
        with self._lock:
            return sum((r.states for r in self.reports), Counter())
