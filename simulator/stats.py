"""What a simulated fleet counts: heartbeats, joins, upgrades, refusals, errors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from simulator.config import AgentState


@dataclass(frozen=True)
class Refusal:
    """A binary the agent would not run. ``reason``: lower_sequence | sha256_mismatch | invalid_section."""

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
    downloads: int = 0  # binaries actually fetched over the network
    download_cache_hits: int = 0  # fetches served by the shared cache (or joined an in-flight one)
    release_refreshes: int = 0
    errors: int = 0
    errors_by_kind: Counter = field(default_factory=Counter)
    # When recorded: each heartbeat as the agent sees it (its wait for one of the fleet's
    # connections included), and its HTTP round trip alone (httpx's ``Response.elapsed``).
    latencies: list[float] = field(default_factory=list)
    round_trips: list[float] = field(default_factory=list)

    def error(self, kind: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] += 1


def status_line(
    *, elapsed: float, online: int, agents: int, versions: Counter, states: Counter, rate: float, stats: FleetStats
) -> str:
    """One progress line: elapsed, agents online, versions, heartbeats/s, errors, upgrades, agents not up."""
    shown = " ".join(f"{version}={count}" for version, count in sorted(versions.items())) or "-"
    kinds = ",".join(f"{kind}={count}" for kind, count in stats.errors_by_kind.most_common(3))
    return (
        f"[{elapsed:7.1f}s] online {online}/{agents}"
        f" | versions {shown}"
        f" | {rate:.1f} hb/s"
        f" | errors {stats.errors}{f' ({kinds})' if kinds else ''}"
        f" | upgrades {stats.upgrades} failed {stats.failed_upgrades}"
        f" refusals {stats.refusals} down {states.get(AgentState.DOWN, 0)}"
        f" offline {states.get(AgentState.OFFLINE, 0)} away {states.get(AgentState.AWAY, 0)}"
    )
