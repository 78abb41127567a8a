"""Simulated ``bcd`` node agents: N agents in one asyncio process, over real HTTP.

Each agent speaks the node agent protocol (docs/api.md#the-node-agent-api) like the real
``bcd``:

- it joins with ``POST /api/compute/agent/session`` and heartbeats with the same
  call every ``heartbeatSeconds`` (the server's answer, or an override, scaled,
  with jitter so that a thousand agents do not beat in lockstep);
- it trusts only the release keys it is given (``release_pins``,
  ``release_threshold``: root 1 of the key chain) and the roots it verifies
  from them; when ``spec.daemon`` names a version other than the one it runs
  (an agent whose protocolVersion is below ``spec_min_protocol_version``
  ignores ``spec.daemon``), or a ``daemon.upgrade`` command arrives, it
  verifies the signed release the section carries (docs/signing.md: roots,
  signatures, version, expiry, no sequence below the one it confirmed),
  downloads the binary (one download per (url, sha256) for the whole fleet),
  checks its size and sha256 against the signed manifest (every agent hashes
  the bytes itself), leaves with ``DELETE /api/compute/agent/session``,
  "restarts" (a delay) and rejoins reporting the new version; the release's
  sequence is confirmed when the rejoin is answered. A refusal is reported on
  its next session call (``"refused": {"version", "code", "detail"}``);
- failure injection: ``never_rejoin`` (leaves and stays down) or
  ``rejoin_old`` (comes back still reporting the old version) for a seeded,
  deterministic share of the agents and/or for a target version; ``offline``
  agents never join at all;
- a failed HTTP call is counted and retried at the next beat; nothing an
  agent meets crashes the process.

Python API (used by the tests, the benchmark and the demo)::

    fleet = Fleet(base_url, [AgentConfig(token=t) for t in tokens], release_pins=[pin], heartbeat_seconds=0.5)
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
from simulator.fleet import Fleet, default_max_connections
from simulator.shards import ShardedFleet
from simulator.stats import FleetStats
from simulator.thread import FleetThread

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
