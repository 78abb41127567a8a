"""What an agent needs from the fleet that runs it: a Protocol, so that simulator/agent.py imports no fleet.

``simulator.fleet.Fleet`` provides it (and holds its agents); a test or another runner may provide
its own. Read-only members: an agent reads its fleet's settings and shared objects, it never sets them.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from simulator.connection import Answer
from simulator.downloads import Fetched
from simulator.stats import FleetStats


class AgentFleet(Protocol):
    @property
    def stats(self) -> FleetStats: ...

    @property
    def base_url(self) -> str: ...

    @property
    def release_pins(self) -> tuple[str, ...]: ...

    @property
    def release_threshold(self) -> int: ...

    @property
    def seed(self) -> int: ...

    @property
    def heartbeat_override(self) -> float | None: ...

    @property
    def heartbeat_scale(self) -> float: ...

    @property
    def jitter(self) -> float: ...

    @property
    def restart_delay(self) -> float: ...

    @property
    def restart_jitter(self) -> float: ...

    @property
    def spec_min_protocol_version(self) -> int: ...

    @property
    def leave_on_stop(self) -> bool: ...

    @property
    def record_latencies(self) -> bool: ...

    @property
    def watch(self) -> bool:
        """Session requests are held (``wait``, ``seen``): docs/simulator.md, "Watching"."""
        ...

    @property
    def retry(self) -> str:
        """How failed calls are retried: ``"backoff"`` (docs/fleet.md#retries) or ``"fixed"`` (simulator/retry.py)."""
        ...

    def start_spread(self) -> float:
        """Over how many seconds the agents' first beats are spread."""
        ...

    async def sleep(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; False (at once) when the fleet is stopping."""
        ...

    async def fetch_binary(self, agent: Any, url: str, sha256: str) -> Fetched:
        """The agent's download of ``url``: its digest and size as received (simulator/downloads.py)."""
        ...

    async def request(
        self,
        method: str,
        path: str,
        token: str,
        *,
        kind: str,
        agent: Any = None,  # the calling agent, told of a failure (typed Any: this module names no agent)
        final_4xx: bool = False,
        json: Any = None,
    ) -> httpx.Response | Answer | None:
        """One API call; a failure is counted (on the agent too) and answers None."""
        ...
