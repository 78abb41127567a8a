"""What a simulated fleet counts: heartbeats, joins, upgrades, refusals, errors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


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
    latencies: list[float] = field(default_factory=list)  # heartbeat latencies, when recorded

    def error(self, kind: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] += 1
