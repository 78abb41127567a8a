"""Simulated ``bcd`` node agents: N agents in one asyncio process, over real HTTP.

Each agent speaks the node agent protocol (CONTRACT section 6) like the real
``bcd``:

- it joins with ``POST /api/compute/agent/session`` and heartbeats with the same
  call every ``heartbeatSeconds`` (the server's answer, or an override, scaled,
  with jitter so that a thousand agents do not beat in lockstep);
- when ``spec.daemon`` names a version other than the one it runs (an agent
  whose protocolVersion is below ``spec_min_protocol_version`` ignores
  ``spec.daemon``), or a ``daemon.upgrade`` command arrives, it checks the
  release sequence, downloads the binary (one download per (url, sha256) for
  the whole fleet), checks its sha256 (every agent hashes the bytes itself),
  leaves with ``DELETE /api/compute/agent/session``, "restarts" (a delay) and
  rejoins reporting the new version; the release is confirmed when the rejoin
  is answered;
- after confirming a release it refuses a binary of a lower sequence. The
  daemon section carries no sequence: sequences come from a mapping given to
  the fleet and, with an operator API key, from ``GET /api/compute/releases/``
  (fetched again when an unknown version appears, at most every
  ``refresh_interval`` seconds). A version whose sequence stays unknown is not
  refused on sequence grounds;
- failure injection: ``never_rejoin`` (leaves and stays down) or
  ``rejoin_old`` (comes back still reporting the old version) for a seeded,
  deterministic share of the agents and/or for a target version; ``offline``
  agents never join at all;
- a failed HTTP call is counted and retried at the next beat; nothing an
  agent meets crashes the process.

Python API (used by the tests, the benchmark and the demo)::

    fleet = Fleet(base_url, [AgentConfig(token=t) for t in tokens], heartbeat_seconds=0.5)
    met = await fleet.run(until=lambda f: f.versions()["1.1.0"] == len(tokens), timeout=60)

or, from synchronous code (a test holding the Django ORM)::

    with fleet.start_thread() as running:
        running.wait_for(lambda f: f.online_count() == 50, timeout=20)

The same module is the command line: ``python manage.py simulate_agents`` or
``python -m simulator`` (see docs/simulator.md). It does not
import Django.
"""

from simulator.cli import add_arguments, main, run_cli
from simulator.config import (
    NEVER_REJOIN,
    REJOIN_OLD,
    AgentConfig,
    AgentState,
    SimulatorError,
    build_agent_configs,
    select_share,
)
from simulator.downloads import AgentDownloads, Fetched, SharedDownloads
from simulator.enrolment import EnrolledNode, enroll, read_tokens, write_tokens
from simulator.fleet import Fleet, FleetThread, default_max_connections
from simulator.releases import SequenceBook
from simulator.shards import ShardedFleet
from simulator.stats import FleetStats

__all__ = [
    "NEVER_REJOIN",
    "REJOIN_OLD",
    "AgentConfig",
    "AgentDownloads",
    "AgentState",
    "EnrolledNode",
    "Fetched",
    "Fleet",
    "FleetStats",
    "FleetThread",
    "SequenceBook",
    "ShardedFleet",
    "SharedDownloads",
    "SimulatorError",
    "add_arguments",
    "build_agent_configs",
    "default_max_connections",
    "enroll",
    "main",
    "read_tokens",
    "run_cli",
    "select_share",
    "write_tokens",
]
