"""What a simulated fleet counts: heartbeats, joins, upgrades, refusals, errors."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from simulator.config import AgentState


@dataclass(frozen=True)
class Refusal:
    """A binary the agent would not run. ``reason``: a refusal code it reported (rollout.release.agent.REFUSAL_CODES:
    bad_root, bad_signature, wrong_version, expired, sequence_rollback, digest_mismatch, download_failed), or
    invalid_section (no version to report it for)."""

    version: str
    reason: str
    detail: str
    at: float


@dataclass(frozen=True)
class Upgrade:
    """A restart into a new binary. ``outcome``: upgraded | never_rejoin | rejoin_old."""

    from_version: str
    to_version: str
    outcome: str
    source: str  # "spec" or "command"
    at: float


@dataclass
class FleetStats:
    heartbeats: int = 0  # answered POST session calls (joins included)
    joins: int = 0
    leaves: int = 0
    acks: int = 0
    upgrades: int = 0
    failed_upgrades: int = 0
    refusals: int = 0
    downloads: int = 0  # binaries fetched whole over the network (each agent its own, unless shared)
    download_cache_hits: int = 0  # --shared-downloads: fetches served by the shared cache (or an in-flight one)
    download_bytes: int = 0  # body bytes received, resumed and restarted downloads included
    download_seconds: float = 0.0  # summed over agents: from the first request to the last byte
    download_resumes: int = 0  # downloads continued with Range + If-Range after a cut
    throttled: int = 0  # 429 answers: the request waited its Retry-After and was sent again
    overloaded: int = 0  # 503 answers with Retry-After (the server busy, or its database down): the same
    cut_retries: int = 0  # held requests cut without an answer and sent again at once (docs/fleet.md#retries)
    answers: Counter = field(default_factory=Counter)  # HTTP status -> answers (each try of a request counted)
    errors: int = 0
    errors_by_kind: Counter = field(default_factory=Counter)
    # When recorded: each heartbeat as the agent sees it (its wait for one of the fleet's
    # connections included), and its HTTP round trip alone (httpx's ``Response.elapsed``).
    latencies: list[float] = field(default_factory=list)
    round_trips: list[float] = field(default_factory=list)
    # When recorded (in the fleet's own process): each wait after a Retry-After, in seconds (docs/fleet.md#retries).
    retry_waits: list[float] = field(default_factory=list)

    def error(self, kind: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] += 1


class FleetStatus:
    """``status_line()`` for a fleet of simulated agents (``Fleet``, ``ShardedFleet``), from what both observe."""

    stats: FleetStats
    started_at: float | None
    agent_count: int
    _rate_mark: tuple[float, int] | None = None  # (when, heartbeats) at the previous status line

    def online_count(self) -> int:
        raise NotImplementedError

    def versions(self) -> Counter:
        raise NotImplementedError

    def states(self) -> Counter:
        raise NotImplementedError

    def status_line(self) -> str:
        """One line: elapsed, agents online, versions, heartbeats/s since the last call, errors, upgrades,
        agents not up."""
        now = time.monotonic()
        started_at = self.started_at if self.started_at is not None else now
        mark_at, mark_beats = self._rate_mark or (started_at, 0)
        stats = self.stats
        self._rate_mark = (now, stats.heartbeats)
        rate = (stats.heartbeats - mark_beats) / (now - mark_at) if now > mark_at else 0.0
        versions, states = self.versions(), self.states()
        shown = " ".join(f"{version}={count}" for version, count in sorted(versions.items())) or "-"
        kinds = ",".join(f"{kind}={count}" for kind, count in stats.errors_by_kind.most_common(3))
        return (
            f"[{now - started_at:7.1f}s] online {self.online_count()}/{self.agent_count}"
            f" | versions {shown}"
            f" | {rate:.1f} hb/s"
            f" | errors {stats.errors}{f' ({kinds})' if kinds else ''}"
            f"{f' | throttled {stats.throttled}' if stats.throttled else ''}"
            f"{f' | overloaded {stats.overloaded}' if stats.overloaded else ''}"
            f"{f' | cut {stats.cut_retries}' if stats.cut_retries else ''}"
            f" | upgrades {stats.upgrades} failed {stats.failed_upgrades}"
            f" refusals {stats.refusals} down {states.get(AgentState.DOWN, 0)}"
            f" offline {states.get(AgentState.OFFLINE, 0)} away {states.get(AgentState.AWAY, 0)}"
        )
