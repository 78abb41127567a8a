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
``python -m project.fleet.simulator`` (see docs/simulator.md). It does not
import Django.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import enum
import hashlib
import json
import logging
import math
import os
import random
import secrets
import signal
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

logger = logging.getLogger(__name__)

DEFAULT_DAEMON_VERSION = "1.0.0"
DEFAULT_PROTOCOL_VERSION = 3
# The server's default FLEET_MIN_PROTOCOL_VERSION: agents below it predate
# spec.daemon and upgrade only through daemon.upgrade commands.
SPEC_MIN_PROTOCOL_VERSION = 2
DEFAULT_HEARTBEAT_SECONDS = 10.0
NEVER_REJOIN = "never_rejoin"
REJOIN_OLD = "rejoin_old"
FAIL_MODES = (NEVER_REJOIN, REJOIN_OLD)
UPGRADE_COMMAND = "daemon.upgrade"

SESSION_PATH = "/api/compute/agent/session"
ACK_PATH = "/api/compute/agent/commands/{id}/ack"
RELEASES_PATH = "/api/compute/releases/"
POOLS_PATH = "/api/compute/pools/"
NODES_PATH = "/api/compute/nodes/"


class SimulatorError(Exception):
    """A setup problem the command reports and exits on (bad flags, enrolment refused)."""


class AgentState(enum.StrEnum):
    OFFLINE = "offline"  # configured never to join
    JOINING = "joining"  # has no open session: first join, or rejoin after a restart
    ONLINE = "online"  # its session is open
    UPGRADING = "upgrading"  # downloading and checking a binary
    RESTARTING = "restarting"  # left its session, "restarting" into a new binary
    DOWN = "down"  # never_rejoin: left and stays down


# --------------------------------------------------------------------------------------
# Configuration of one agent, and the deterministic selection of shares
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentConfig:
    """One simulated node agent.

    ``fail_mode`` (``never_rejoin`` | ``rejoin_old``) applies to every upgrade
    when ``fail_versions`` is None, else only to upgrades to those versions.
    ``confirmed_sequence`` is the sequence the agent has already confirmed;
    when None it is learned from its running version at its first join.
    """

    token: str
    name: str = ""
    daemon_version: str = DEFAULT_DAEMON_VERSION
    protocol_version: int = DEFAULT_PROTOCOL_VERSION
    offline: bool = False
    fail_mode: str | None = None
    fail_versions: frozenset[str] | None = None
    confirmed_sequence: int | None = None

    def __post_init__(self) -> None:
        if self.fail_mode is not None and self.fail_mode not in FAIL_MODES:
            raise ValueError(f"fail_mode must be one of {FAIL_MODES}, not {self.fail_mode!r}")

    def failure_for(self, version: str) -> str | None:
        """The failure this agent injects when upgrading to ``version``, or None."""
        if self.fail_mode is None:
            return None
        if self.fail_versions is not None and version not in self.fail_versions:
            return None
        return self.fail_mode


def select_share(keys: Sequence[str], share: float, *, seed: int, salt: str = "") -> set[str]:
    """Exactly ``round(share * len(keys))`` of ``keys``, chosen deterministically by ``seed``.

    Each key is ranked by SHA-256 of ``seed:salt:key``: the choice depends only
    on the seed and the key itself (not on the order of ``keys``), and a larger
    share selects a superset of a smaller one.
    """
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], not {share!r}")
    count = math.floor(share * len(keys) + 0.5)
    ranked = sorted(keys, key=lambda key: hashlib.sha256(f"{seed}:{salt}:{key}".encode()).digest())
    return set(ranked[:count])


def build_agent_configs(
    tokens: Sequence[str | tuple[str, str]],
    *,
    daemon_version: str = DEFAULT_DAEMON_VERSION,
    protocol_version: int = DEFAULT_PROTOCOL_VERSION,
    fail_share: float | None = None,
    fail_version: str | None = None,
    fail_mode: str = NEVER_REJOIN,
    offline_share: float = 0.0,
    seed: int = 0,
) -> list[AgentConfig]:
    """Configs for agents holding ``tokens`` (plain tokens or ``(name, token)`` pairs).

    Failure injection:
    - ``fail_share`` only: that share of the agents fails on any upgrade;
    - ``fail_version`` only: every agent fails when upgrading to that version;
    - both: that share fails, only when upgrading to that version.
    Agents are selected by name (or token when unnamed) with ``select_share``.
    """
    if fail_mode not in FAIL_MODES:
        raise ValueError(f"fail_mode must be one of {FAIL_MODES}, not {fail_mode!r}")
    agents = [("", item) if isinstance(item, str) else (item[0], item[1]) for item in tokens]
    keys = [name or token for name, token in agents]
    offline = select_share(keys, offline_share, seed=seed, salt="offline")
    if fail_share is not None:
        failing = select_share(keys, fail_share, seed=seed, salt="fail")
    elif fail_version is not None:
        failing = set(keys)
    else:
        failing = set()
    fail_versions = frozenset([fail_version]) if fail_version is not None else None
    return [
        AgentConfig(
            token=token,
            name=name,
            daemon_version=daemon_version,
            protocol_version=protocol_version,
            offline=key in offline,
            fail_mode=fail_mode if key in failing else None,
            fail_versions=fail_versions if key in failing else None,
        )
        for key, (name, token) in zip(keys, agents, strict=True)
    ]


# --------------------------------------------------------------------------------------
# What an agent records
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Shared helpers: the binary cache and the version -> sequence book
# --------------------------------------------------------------------------------------


class BinaryCache:
    """Downloads keyed by (url, sha256), shared by all agents; concurrent misses share one fetch.

    The cache only saves bandwidth: every agent still hashes the bytes it gets.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        stats: FleetStats,
        *,
        timeout: float,
        max_entries: int = 16,
        gate: asyncio.Semaphore | None = None,
    ):
        self._client = client
        self._gate = gate or asyncio.Semaphore(1 << 30)
        self._stats = stats
        self._timeout = timeout
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[bytes]] = {}

    async def fetch(self, url: str, sha256: str) -> bytes:
        key = (url, sha256.lower())
        if key in self._entries:
            self._entries.move_to_end(key)
            self._stats.download_cache_hits += 1
            return self._entries[key]
        inflight = self._inflight.get(key)
        if inflight is not None:
            self._stats.download_cache_hits += 1
            return await asyncio.shield(inflight)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        # Nobody may be waiting on a failed fetch: mark its exception as retrieved.
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._inflight[key] = future
        try:
            async with self._gate:
                response = await self._client.get(url, timeout=self._timeout, follow_redirects=True)
            response.raise_for_status()
            data = response.content
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            self._inflight.pop(key, None)
        self._stats.downloads += 1
        self._entries[key] = data
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        future.set_result(data)
        return data


class SequencesUnavailable(Exception):
    """The releases list could not be read: the sequence of a version is not known yet."""


class SequenceBook:
    """Release sequences by version: from a given mapping, and from ``GET /api/compute/releases/``.

    With an API key, a lookup of an unknown version is answered only by a
    list fetched after the lookup began: the lookup waits for the next
    refresh (one at a time for the whole fleet, at most every
    ``refresh_interval`` seconds) and raises ``SequencesUnavailable`` when
    that refresh fails, so that a version is never judged on a stale list.
    A version still unknown after a fresh list has no sequence (None). The
    server's list wins over the mapping for a version both know.
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        api_key: str | None,
        mapping: Mapping[str, int] | None = None,
        refresh_interval: float = 2.0,
    ):
        self._fleet = fleet
        self._api_key = api_key
        self.known: dict[str, int] = dict(mapping or {})
        self._refresh_interval = refresh_interval
        self._refreshed_at: float | None = None  # when the last refresh started
        self._refresh_ok = False
        self._lock = asyncio.Lock()

    async def sequence_of(self, version: str) -> int | None:
        if version in self.known or not self._api_key:
            return self.known.get(version)
        asked = time.monotonic()
        async with self._lock:
            if version in self.known:
                return self.known[version]
            if self._refreshed_at is None or self._refreshed_at < asked:
                if self._refreshed_at is not None:
                    wait = self._refreshed_at + self._refresh_interval - time.monotonic()
                    if wait > 0 and not await self._fleet.sleep(wait):
                        raise SequencesUnavailable("the fleet is stopping")
                self._refreshed_at = time.monotonic()
                self._refresh_ok = await self.refresh()
            if not self._refresh_ok:
                raise SequencesUnavailable("GET /api/compute/releases/ failed")
        return self.known.get(version)

    async def refresh(self) -> bool:
        """Fetch the releases list; True when it was read."""
        response = await self._fleet.request("GET", RELEASES_PATH, self._api_key or "", kind="releases")
        if response is None:
            return False
        try:
            body = response.json()
            rows = body.get("results", body) if isinstance(body, dict) else body
            learned = {str(row["version"]): int(row["sequence"]) for row in rows}
        except (ValueError, TypeError, KeyError, AttributeError):
            self._fleet.stats.error("releases_bad_body")
            return False
        self.known.update(learned)
        self._fleet.stats.release_refreshes += 1
        return True


# --------------------------------------------------------------------------------------
# One agent
# --------------------------------------------------------------------------------------


class _Verdict(enum.Enum):
    CURRENT = "current"  # already runs that version
    GO = "go"  # binary downloaded and verified: restart into it
    REFUSED = "refused"  # will not run it (recorded once)
    RETRY = "retry"  # could not decide now (download failed): try again at the next beat


class Agent:
    """A simulated bcd. Its public attributes are the observable state (read them from any thread)."""

    def __init__(self, fleet: Fleet, config: AgentConfig, index: int):
        self.fleet = fleet
        self.config = config
        self.index = index
        self.name = config.name or f"agent-{index}"
        self.version = config.daemon_version
        self.state = AgentState.OFFLINE if config.offline else AgentState.JOINING
        self.confirmed_sequence = config.confirmed_sequence
        self.heartbeat_seconds: float | None = None  # the server's last answer
        self.spec: dict | None = None  # the server's last spec
        self.heartbeats = 0
        self.joins = 0
        self.errors = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.upgrades: list[Upgrade] = []  # every restart into a new binary, successful or not
        self.refusals: list[Refusal] = []
        self.acked: dict[str, bool] = {}  # command id -> ok
        self._session_open = False
        self._pending_confirm: str | None = None
        self._given_up: dict[tuple[str, str, str], str] = {}  # section -> reason (refused or failed)
        # Jitter only, never security: a seeded PRNG makes runs reproducible.
        self._rng = random.Random(f"{fleet.seed}:{index}:{config.token}")  # noqa: S311

    # -- observable helpers --------------------------------------------------------------

    @property
    def upgrades_done(self) -> int:
        return sum(1 for upgrade in self.upgrades if upgrade.outcome == "upgraded")

    @property
    def failed_upgrades(self) -> list[Upgrade]:
        return [upgrade for upgrade in self.upgrades if upgrade.outcome != "upgraded"]

    @property
    def online(self) -> bool:
        """Joined, and its last beats were answered (the server's 3 x heartbeat rule, in beats)."""
        return self.state == AgentState.ONLINE and self.consecutive_failures < 3

    @property
    def applies_spec(self) -> bool:
        return self.config.protocol_version >= self.fleet.spec_min_protocol_version

    def __repr__(self) -> str:
        return f"<Agent {self.name} {self.version} {self.state}>"

    # -- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        if self.config.offline:
            return
        fleet = self.fleet
        if not await fleet.sleep(self._rng.uniform(0, fleet.start_spread())):
            return
        while True:
            try:
                delay = await self._beat()
            except Exception as exc:  # an agent bug must not take the fleet down
                logger.exception("simulated agent %s failed a beat", self.name)
                self._failed("internal", repr(exc))
                delay = self._interval()
            if delay is None or not await fleet.sleep(delay):
                break
        if fleet.leave_on_stop and self._session_open and self.state != AgentState.DOWN:
            await self._leave()

    def _interval(self) -> float:
        fleet = self.fleet
        if fleet.heartbeat_override is not None:
            base = fleet.heartbeat_override
        else:
            base = (self.heartbeat_seconds or DEFAULT_HEARTBEAT_SECONDS) * fleet.heartbeat_scale
        return max(0.001, base * self._rng.uniform(1 - fleet.jitter, 1 + fleet.jitter))

    def _failed(self, kind: str, detail: str) -> None:
        self.errors += 1
        self.consecutive_failures += 1
        self.last_error = f"{kind}: {detail}"
        self.fleet.stats.error(kind)

    async def _beat(self) -> float | None:
        """One heartbeat and what it brings; returns the delay before the next one (None: stay down)."""
        fleet = self.fleet
        started = time.perf_counter()
        response = await fleet.request(
            "POST",
            SESSION_PATH,
            self.config.token,
            json={"daemonVersion": self.version, "protocolVersion": self.config.protocol_version},
            kind="session",
            agent=self,
        )
        if response is None:
            return self._interval()
        if fleet.record_latencies:
            fleet.stats.latencies.append(time.perf_counter() - started)
        try:
            body = response.json()
            spec = body.get("spec") or {}
            commands = body.get("commands") or []
            heartbeat_seconds = body.get("heartbeatSeconds")
            if not isinstance(spec, dict) or not isinstance(commands, list):
                raise TypeError("spec must be an object and commands a list")
        except (ValueError, TypeError, AttributeError) as exc:
            self._failed("session_bad_body", str(exc))
            return self._interval()

        fleet.stats.heartbeats += 1
        self.heartbeats += 1
        self.consecutive_failures = 0
        if not self._session_open:
            self._session_open = True
            self.joins += 1
            fleet.stats.joins += 1
            await self._confirm(self._pending_confirm or self.version)
            self._pending_confirm = None
        self.state = AgentState.ONLINE
        if isinstance(heartbeat_seconds, int | float) and heartbeat_seconds > 0:
            self.heartbeat_seconds = float(heartbeat_seconds)
        self.spec = spec

        target: tuple[dict, str] | None = None
        for command in commands:
            section = await self._handle_command(command, going=target is not None)
            if section is not None:
                target = (section, "command")
        daemon = spec.get("daemon")
        if target is None and self.applies_spec and daemon is not None and await self._consider(daemon) is _Verdict.GO:
            target = (daemon, "spec")
        if target is not None:
            return await self._restart_into(*target)
        return self._interval()

    async def _confirm(self, version: str) -> None:
        try:
            sequence = await self.fleet.sequences.sequence_of(version)
        except SequencesUnavailable:
            return  # confirmed again at the next lookup that succeeds: see _consider
        if sequence is not None and (self.confirmed_sequence is None or sequence > self.confirmed_sequence):
            self.confirmed_sequence = sequence

    # -- commands ------------------------------------------------------------------------

    async def _handle_command(self, command: Any, *, going: bool) -> dict | None:
        """Act on one command; returns the daemon section to restart into, if any."""
        if not isinstance(command, dict) or not command.get("id"):
            self._failed("bad_command", repr(command)[:200])
            return None
        command_id = str(command["id"])
        if command_id in self.acked:
            return None
        if command.get("kind") != UPGRADE_COMMAND:
            await self._ack(command_id, ok=False, error=f"unknown command kind {command.get('kind')!r}")
            return None
        if going:  # already restarting into another section this beat: the next session redelivers it
            return None
        section = command.get("payload")
        verdict = await self._consider(section)
        if verdict is _Verdict.RETRY:
            return None
        if verdict is _Verdict.REFUSED:
            await self._ack(command_id, ok=False, error=self._given_up.get(_section_key(section), "refused"))
            return None
        await self._ack(command_id, ok=True)
        return section if verdict is _Verdict.GO else None

    async def _ack(self, command_id: str, *, ok: bool, error: str | None = None) -> None:
        body: dict[str, Any] = {"ok": ok}
        if error is not None:
            body["error"] = error
        response = await self.fleet.request(
            "POST", ACK_PATH.format(id=command_id), self.config.token, json=body, kind="ack", agent=self, final_4xx=True
        )
        if response is not None:
            self.acked[command_id] = ok
            self.fleet.stats.acks += 1

    # -- upgrades ------------------------------------------------------------------------

    def _refuse(self, section: Any, reason: str, detail: str) -> _Verdict:
        version = section.get("version") if isinstance(section, dict) else None
        self._given_up[_section_key(section)] = f"{reason}: {detail}"
        self.refusals.append(Refusal(version=str(version), reason=reason, detail=detail, at=time.time()))
        self.fleet.stats.refusals += 1
        logger.info("simulated agent %s refuses %s: %s (%s)", self.name, version, reason, detail)
        return _Verdict.REFUSED

    async def _consider(self, section: Any) -> _Verdict:
        """Decide on a daemon section; on GO the verified binary is ready."""
        if not _valid_section(section):
            if _section_key(section) in self._given_up:
                return _Verdict.REFUSED
            return self._refuse(section, "invalid_section", f"not a daemon section: {section!r}"[:200])
        version, url, sha256 = section["version"], section["url"], section["sha256"].lower()
        if version == self.version:
            return _Verdict.CURRENT
        if _section_key(section) in self._given_up:
            return _Verdict.REFUSED
        try:
            if self.confirmed_sequence is None:  # the join could not learn it: try again first
                await self._confirm(self.version)
            sequence = await self.fleet.sequences.sequence_of(version)
        except SequencesUnavailable as exc:
            self._failed("sequence_unknown", f"{version}: {exc}")
            return _Verdict.RETRY
        if sequence is not None and self.confirmed_sequence is not None and sequence < self.confirmed_sequence:
            return self._refuse(
                section, "lower_sequence", f"sequence {sequence} < confirmed sequence {self.confirmed_sequence}"
            )
        previous_state, self.state = self.state, AgentState.UPGRADING
        try:
            data = await self.fleet.binaries.fetch(url, sha256)
        except httpx.HTTPStatusError as exc:
            self._failed("download", f"{exc.response.status_code} for {url}")
            return _Verdict.RETRY
        except httpx.HTTPError as exc:
            self._failed("download", f"{type(exc).__name__} for {url}")
            return _Verdict.RETRY
        finally:
            self.state = previous_state
        digest = await _sha256(data)
        if digest != sha256:
            return self._refuse(section, "sha256_mismatch", f"got {digest}, expected {sha256}")
        return _Verdict.GO

    async def _leave(self) -> None:
        response = await self.fleet.request("DELETE", SESSION_PATH, self.config.token, kind="leave", agent=self)
        self._session_open = False
        if response is not None:
            self.fleet.stats.leaves += 1

    async def _restart_into(self, section: dict, source: str) -> float | None:
        """Leave, "restart", and come back on the new binary (or fail as configured)."""
        fleet = self.fleet
        old, new = self.version, section["version"]
        # The real bcd restarts even when it cannot tell the server: the session then times out.
        await self._leave()
        self.state = AgentState.RESTARTING
        delay = fleet.restart_delay + self._rng.uniform(0, fleet.restart_jitter)
        if not await fleet.sleep(delay):
            return None
        failure = self.config.failure_for(new)
        self.upgrades.append(
            Upgrade(from_version=old, to_version=new, outcome=failure or "upgraded", source=source, at=time.time())
        )
        if failure == NEVER_REJOIN:
            fleet.stats.failed_upgrades += 1
            self.state = AgentState.DOWN
            logger.info("simulated agent %s stays down after leaving for %s (never_rejoin)", self.name, new)
            return None
        self.state = AgentState.JOINING
        if failure == REJOIN_OLD:
            fleet.stats.failed_upgrades += 1
            # The new binary "crashed" and the old one came back: do not loop on that section.
            self._given_up[_section_key(section)] = "rejoin_old: the new binary did not stay up"
            return 0.0
        fleet.stats.upgrades += 1
        self.version = new
        self._pending_confirm = new
        return 0.0


def _valid_section(section: Any) -> bool:
    return isinstance(section, dict) and all(
        isinstance(section.get(key), str) and section.get(key) for key in ("version", "url", "sha256")
    )


def _section_key(section: Any) -> tuple[str, str, str]:
    if not isinstance(section, dict):
        return ("", "", repr(section))
    return (str(section.get("version")), str(section.get("url")), str(section.get("sha256")).lower())


async def _sha256(data: bytes) -> str:
    if len(data) < 1 << 20:
        return hashlib.sha256(data).hexdigest()
    # hashlib releases the GIL on large buffers: hash off the event loop.
    return await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())


# --------------------------------------------------------------------------------------
# The fleet
# --------------------------------------------------------------------------------------


def default_max_connections(agents: int) -> int:
    """The connection pool for ``agents`` agents: one per 64 agents, from 8 to 16.

    Agents beat once per interval and a heartbeat takes milliseconds, so even
    1,000 agents at a 2 s interval keep only a handful of requests in flight
    (rate x latency: 500/s x 20 ms = 10). The pool size is also the in-flight
    limit (a semaphore in front of httpx), because httpcore's pool costs
    O(connections) per request (a readability poll of every idle connection)
    plus O(queued x connections) to hand connections out: a pool of one
    connection per agent, with a thousand requests queued inside it, burns
    the client's CPU in that bookkeeping. Measured on 2 cores, 1,000 agents
    against a trivial server: about 1.6 ms of client CPU per heartbeat with
    8 connections, 2.3 ms with 16, 2.4-2.7 ms with 32, 4.2 ms with 256.
    """
    return max(8, min(16, math.ceil(agents / 64)))


class Fleet:
    """N simulated agents sharing one ``httpx.AsyncClient`` (HTTP/1.1, keep-alive).

    Arguments:
    - ``base_url``: the server, e.g. ``http://127.0.0.1:8000``;
    - ``agents``: one ``AgentConfig`` per agent;
    - ``api_key``: an operator key, used only to read ``GET /api/compute/releases/``;
    - ``sequences``: a known version -> release sequence mapping (see ``SequenceBook``);
    - ``heartbeat_seconds``: override the server's heartbeatSeconds; else the
      server's value times ``heartbeat_scale``; each interval gets +/- ``jitter``
      (a fraction) and first beats are spread over ``start_spread`` seconds
      (default: one interval);
    - ``restart_delay`` + uniform(0, ``restart_jitter``): seconds an upgrade's restart takes;
    - ``seed``: makes jitter reproducible;
    - ``spec_min_protocol_version``: agents below it ignore ``spec.daemon``;
    - ``leave_on_stop``: open sessions leave (DELETE) when the fleet stops;
    - ``record_latencies``: keep every heartbeat latency in ``stats.latencies``;
    - ``max_connections``: the connection pool size, and the most requests in flight at once
      (default ``default_max_connections(n)``: from 8 to 16 with the number of agents);
    - ``client``: an ``httpx.AsyncClient`` to use instead of creating one.
    """

    def __init__(
        self,
        base_url: str,
        agents: Sequence[AgentConfig],
        *,
        api_key: str | None = None,
        sequences: Mapping[str, int] | None = None,
        heartbeat_seconds: float | None = None,
        heartbeat_scale: float = 1.0,
        jitter: float = 0.1,
        start_spread: float | None = None,
        restart_delay: float = 1.0,
        restart_jitter: float = 0.0,
        seed: int = 0,
        request_timeout: float = 10.0,
        download_timeout: float = 60.0,
        max_connections: int | None = None,
        spec_min_protocol_version: int = SPEC_MIN_PROTOCOL_VERSION,
        leave_on_stop: bool = False,
        record_latencies: bool = False,
        release_refresh_interval: float = 2.0,
        client: httpx.AsyncClient | None = None,
    ):
        if not 0 <= jitter < 1:
            raise ValueError("jitter is a fraction in [0, 1)")
        if heartbeat_seconds is not None and heartbeat_seconds <= 0:
            raise ValueError("heartbeat_seconds must be positive")
        if heartbeat_scale <= 0 or restart_delay < 0 or restart_jitter < 0:
            raise ValueError("heartbeat_scale must be positive; restart delays must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.heartbeat_override = heartbeat_seconds
        self.heartbeat_scale = heartbeat_scale
        self.jitter = jitter
        self._start_spread = start_spread
        self.restart_delay = restart_delay
        self.restart_jitter = restart_jitter
        self.seed = seed
        self.request_timeout = request_timeout
        self.download_timeout = download_timeout
        self.spec_min_protocol_version = spec_min_protocol_version
        self.leave_on_stop = leave_on_stop
        self.record_latencies = record_latencies
        self.max_connections = max_connections or default_max_connections(
            sum(1 for config in agents if not config.offline)
        )
        self.stats = FleetStats()
        self.agents = [Agent(self, config, index) for index, config in enumerate(agents)]
        self._sequence_mapping = dict(sequences or {})
        self._release_refresh_interval = release_refresh_interval
        self._given_client = client
        self._client: httpx.AsyncClient | None = None
        self.binaries: BinaryCache
        self._gate: asyncio.Semaphore
        self.sequences: SequenceBook
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_future: asyncio.Future[None] | None = None
        self._stop_requested = threading.Event()
        self.started_at: float | None = None
        self.finished = threading.Event()
        self._rate_mark: tuple[float, int] | None = None

    # -- observation ---------------------------------------------------------------------

    def agent(self, name: str) -> Agent:
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise KeyError(name)

    def versions(self, *, online_only: bool = True) -> Counter:
        """How many agents report each version (online agents only, by default)."""
        return Counter(agent.version for agent in self.agents if agent.online or not online_only)

    def online_count(self) -> int:
        return sum(1 for agent in self.agents if agent.online)

    def states(self) -> Counter:
        return Counter(str(agent.state) for agent in self.agents)

    def status_line(self) -> str:
        """One line: elapsed, agents online, versions, heartbeats/s since the last call, errors, upgrades."""
        now = time.monotonic()
        elapsed = now - self.started_at if self.started_at is not None else 0.0
        mark_at, mark_beats = self._rate_mark or (self.started_at or now, 0)
        rate = (self.stats.heartbeats - mark_beats) / (now - mark_at) if now > mark_at else 0.0
        self._rate_mark = (now, self.stats.heartbeats)
        versions = " ".join(f"{version}={count}" for version, count in sorted(self.versions().items())) or "-"
        states = self.states()
        errors = self.stats.errors
        kinds = ",".join(f"{kind}={count}" for kind, count in self.stats.errors_by_kind.most_common(3))
        return (
            f"[{elapsed:7.1f}s] online {self.online_count()}/{len(self.agents)}"
            f" | versions {versions}"
            f" | {rate:.1f} hb/s"
            f" | errors {errors}{f' ({kinds})' if kinds else ''}"
            f" | upgrades {self.stats.upgrades} failed {self.stats.failed_upgrades}"
            f" refusals {self.stats.refusals} down {states.get(AgentState.DOWN, 0)}"
            f" offline {states.get(AgentState.OFFLINE, 0)}"
        )

    def start_spread(self) -> float:
        if self._start_spread is not None:
            return self._start_spread
        if self.heartbeat_override is not None:
            return self.heartbeat_override
        return DEFAULT_HEARTBEAT_SECONDS * self.heartbeat_scale

    # -- HTTP ----------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        token: str,
        *,
        kind: str,
        agent: Agent | None = None,
        final_4xx: bool = False,
        json: Any = None,
    ) -> httpx.Response | None:
        """One API call; a failure is counted (on the agent too) and answers None.

        With ``final_4xx`` a 4xx answer is counted as an error but returned, so
        the caller does not retry what the server will never accept.
        """
        assert self._client is not None, "the fleet is not running"
        try:
            async with self._gate:
                response = await self._client.request(
                    method, self.base_url + path, json=json, headers={"Authorization": f"Bearer {token}"}
                )
        except httpx.HTTPError as exc:
            detail = f"{type(exc).__name__}: {exc}"[:300]
            self._error(f"{kind}_{type(exc).__name__}", detail, agent)
            return None
        if response.is_success:
            return response
        detail = f"HTTP {response.status_code}: {response.text[:200]}"
        self._error(f"{kind}_{response.status_code}", detail, agent)
        if final_4xx and 400 <= response.status_code < 500:
            return response
        return None

    def _error(self, kind: str, detail: str, agent: Agent | None) -> None:
        logger.debug("simulator: %s %s", kind, detail)
        if agent is not None:
            agent._failed(kind, detail)
        else:
            self.stats.error(kind)

    # -- running -------------------------------------------------------------------------

    async def sleep(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; False (at once) when the fleet is stopping."""
        stop = self._stop_future
        if stop is None or stop.done():
            return False
        if delay <= 0:
            await asyncio.sleep(0)
            return not stop.done()
        await asyncio.wait([stop], timeout=delay)
        return not stop.done()

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    def stop(self) -> None:
        """Ask the fleet to stop; safe from any thread and from signal handlers."""
        self._stop_requested.set()
        loop, stop = self._loop, self._stop_future
        if loop is None or stop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            if not stop.done():
                stop.set_result(None)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(lambda: stop.done() or stop.set_result(None))

    def _make_client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(
            max_connections=self.max_connections,
            max_keepalive_connections=self.max_connections,
            keepalive_expiry=5.0,
        )
        timeout = httpx.Timeout(self.request_timeout, connect=min(5.0, self.request_timeout))
        return httpx.AsyncClient(limits=limits, timeout=timeout, http1=True, http2=False)

    async def run(
        self,
        until: Callable[[Fleet], bool] | None = None,
        timeout: float | None = None,
        *,
        poll: float = 0.05,
    ) -> bool:
        """Run every agent until ``until(fleet)`` holds, ``timeout`` passes or ``stop()`` is called.

        Returns True when ``until`` held. Without ``until`` and ``timeout`` it runs
        until ``stop()`` (or until every agent is down or offline).
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop_future = loop.create_future()
        if self._stop_requested.is_set():
            self._stop_future.set_result(None)
        client = self._given_client or self._make_client()
        self._client = client
        self._gate = asyncio.Semaphore(self.max_connections)
        self.binaries = BinaryCache(client, self.stats, timeout=self.download_timeout, gate=self._gate)
        self.sequences = SequenceBook(
            self, api_key=self.api_key, mapping=self._sequence_mapping, refresh_interval=self._release_refresh_interval
        )
        self.started_at = time.monotonic()
        tasks = [asyncio.create_task(agent.run(), name=f"agent:{agent.name}") for agent in self.agents]
        deadline = None if timeout is None else loop.time() + timeout
        met = False
        try:
            while True:
                if until is not None and until(self):
                    met = True
                    break
                if self._stop_future.done():
                    break
                if until is None and all(task.done() for task in tasks):
                    break
                wait = poll if deadline is None else min(poll, deadline - loop.time())
                if wait <= 0:
                    break
                await asyncio.wait([self._stop_future], timeout=wait)
        finally:
            self._stop_requested.set()
            if not self._stop_future.done():
                self._stop_future.set_result(None)
            if tasks:
                # Agents return at their next sleep; give in-flight calls a moment, then cancel.
                _, pending = await asyncio.wait(tasks, timeout=max(2.0, self.request_timeout / 2))
                for task in pending:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._given_client is None:
                await client.aclose()
            self.finished.set()
        return met

    def start_thread(self, timeout: float | None = None) -> FleetThread:
        """Run the fleet on its own event loop in a background thread (for synchronous callers)."""
        return FleetThread(self, timeout=timeout).start()


class FleetThread:
    """A fleet running in a daemon thread; a context manager that stops it on exit."""

    def __init__(self, fleet: Fleet, *, timeout: float | None = None):
        self.fleet = fleet
        self.error: BaseException | None = None
        self._timeout = timeout
        self._thread = threading.Thread(target=self._main, name="simulated-agents", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self.fleet.run(timeout=self._timeout))
        except BaseException as exc:
            self.error = exc
            self.fleet.finished.set()

    def start(self) -> FleetThread:
        self._thread.start()
        return self

    def wait_for(self, predicate: Callable[[Fleet], bool], timeout: float, *, poll: float = 0.05) -> bool:
        """Poll ``predicate(fleet)`` from this thread until it holds (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise RuntimeError("the simulated fleet crashed") from self.error
            if predicate(self.fleet):
                return True
            if time.monotonic() >= deadline or self.fleet.finished.is_set():
                return predicate(self.fleet)
            time.sleep(poll)

    def stop(self, timeout: float = 15.0) -> None:
        self.fleet.stop()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("the simulated fleet did not stop in time")
        if self.error is not None:
            raise RuntimeError("the simulated fleet crashed") from self.error

    def __enter__(self) -> FleetThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --------------------------------------------------------------------------------------
# Enrolment and token files
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnrolledNode:
    name: str
    id: str
    pool_id: str
    token: str


def _operator_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def _detail(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}: {response.text[:300]}"


async def ensure_pools(
    client: httpx.AsyncClient,
    base_url: str,
    api_key: str,
    names: Sequence[str],
    *,
    create: bool = False,
    disruption_budget: float = 0.05,
) -> dict[str, str]:
    """Pool ids by name; missing pools are created when ``create``, else refused."""
    base_url = base_url.rstrip("/")
    response = await client.get(base_url + POOLS_PATH, headers=_operator_headers(api_key))
    if not response.is_success:
        raise SimulatorError(f"listing pools failed: {_detail(response)}")
    body = response.json()
    rows = body.get("results", body) if isinstance(body, dict) else body
    ids = {row["name"]: str(row["id"]) for row in rows}
    for name in names:
        if name in ids:
            continue
        if not create:
            raise SimulatorError(f"no pool named {name!r} (use --create-pools)")
        response = await client.post(
            base_url + POOLS_PATH,
            headers=_operator_headers(api_key),
            json={"name": name, "policy": {"disruptionBudget": disruption_budget}},
        )
        if response.status_code != 201:
            raise SimulatorError(f"creating pool {name!r} failed: {_detail(response)}")
        ids[name] = str(response.json()["id"])
    return {name: ids[name] for name in names}


async def enroll(
    base_url: str,
    api_key: str,
    count: int,
    *,
    pools: Sequence[str] = ("default",),
    create_pools: bool = False,
    name_prefix: str | None = None,
    arch: str = "amd64",
    concurrency: int = 16,
    client: httpx.AsyncClient | None = None,
) -> list[EnrolledNode]:
    """Create ``count`` nodes through ``POST /api/compute/nodes/``, round-robin over ``pools``.

    Names are ``{name_prefix}{i:05d}``; the default prefix is ``sim-<random>-``
    so that enrolling again does not collide with earlier runs.
    """
    if count < 1:
        raise SimulatorError("enrolling needs a count of at least 1")
    if not pools:
        raise SimulatorError("enrolling needs at least one pool")
    prefix = name_prefix if name_prefix is not None else f"sim-{secrets.token_hex(3)}-"
    base_url = base_url.rstrip("/")
    own = client is None
    client = client or httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=concurrency))
    try:
        pool_ids = await ensure_pools(client, base_url, api_key, pools, create=create_pools)
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int) -> EnrolledNode:
            name = f"{prefix}{index:05d}"
            pool_id = pool_ids[pools[index % len(pools)]]
            async with gate:
                response = await client.post(
                    base_url + NODES_PATH,
                    headers=_operator_headers(api_key),
                    json={"name": name, "poolId": pool_id, "arch": arch},
                )
            if response.status_code != 201:
                raise SimulatorError(f"enrolling {name} failed: {_detail(response)}")
            body = response.json()
            return EnrolledNode(name=name, id=str(body["id"]), pool_id=pool_id, token=body["agentToken"])

        return list(await asyncio.gather(*(one(index) for index in range(count))))
    except httpx.HTTPError as exc:
        raise SimulatorError(f"enrolling failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            await client.aclose()


def write_tokens(path: str | Path, nodes: Iterable[EnrolledNode]) -> None:
    """Write enrolled nodes as a JSON list of {"name", "id", "poolId", "token"}, readable by the owner only."""
    rows = [{"name": node.name, "id": node.id, "poolId": node.pool_id, "token": node.token} for node in nodes]
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(rows, handle, indent=1)
        handle.write("\n")


def read_tokens(path: str | Path) -> list[tuple[str, str]]:
    """``(name, token)`` pairs from a tokens file.

    Accepted: a JSON list of tokens or of objects with "token" (and "name"),
    a JSON object {"tokens": [...]}, or text with one token per line (or one
    JSON object per line); blank lines and lines starting with '#' are skipped.
    """
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.strip()
    items: list[Any]
    if stripped.startswith("["):
        items = json.loads(stripped)
    elif stripped.startswith("{") and "\n{" not in stripped:
        body = json.loads(stripped)
        items = body.get("tokens", [body])
    else:
        items = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            items.append(json.loads(line) if line.startswith("{") else line)
    pairs = []
    for item in items:
        if isinstance(item, str):
            pairs.append(("", item))
        elif isinstance(item, dict) and isinstance(item.get("token"), str):
            pairs.append((str(item.get("name") or ""), item["token"]))
        else:
            raise SimulatorError(f"{path}: not a token: {item!r}"[:200])
    if not pairs:
        raise SimulatorError(f"{path}: no tokens")
    return pairs


# --------------------------------------------------------------------------------------
# Command line (shared by `manage.py simulate_agents` and `python -m project.fleet.simulator`)
# --------------------------------------------------------------------------------------


def _share(value: str) -> float:
    share = float(value)
    if not 0 <= share <= 1:
        raise argparse.ArgumentTypeError("a share is a number in [0, 1]")
    return share


def _non_negative(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return number


def _positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return number


def _sequences(value: str) -> dict[str, int]:
    """``1.0.0=1,1.1.0=2`` or ``@file.json`` (a JSON object version -> sequence)."""
    try:
        if value.startswith("@"):
            return {str(k): int(v) for k, v in json.loads(Path(value[1:]).read_text(encoding="utf-8")).items()}
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        return {version.strip(): int(sequence) for version, sequence in pairs}
    except (ValueError, OSError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(f"sequences: {exc}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default="http://127.0.0.1:8000", help="the server's base URL")
    parser.add_argument("--count", type=int, help="how many agents (with --enroll: how many nodes to create)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("ROLLOUT_API_KEY"),
        help="operator API key (compute:fleet:admin), for --enroll and to learn release sequences; "
        "default $ROLLOUT_API_KEY",
    )
    parser.add_argument("--pools", default="default", help="comma-separated pool names to enroll into")
    parser.add_argument("--create-pools", action="store_true", help="create the --pools that do not exist")
    parser.add_argument("--tokens-file", help="agent tokens: read from it, or written to it with --enroll")
    parser.add_argument("--enroll", action="store_true", help="create --count nodes through the API first")
    parser.add_argument("--name-prefix", help="node name prefix for --enroll (default sim-<random>-)")
    parser.add_argument("--arch", default="amd64", help="node arch for --enroll")
    parser.add_argument("--daemon-version", default=DEFAULT_DAEMON_VERSION, help="version the agents start on")
    parser.add_argument("--protocol-version", type=int, default=DEFAULT_PROTOCOL_VERSION)
    parser.add_argument(
        "--spec-min-protocol-version",
        type=int,
        default=SPEC_MIN_PROTOCOL_VERSION,
        help="agents below this protocol version ignore spec.daemon and upgrade on daemon.upgrade commands",
    )
    parser.add_argument("--heartbeat-seconds", type=_positive, help="override the server's heartbeatSeconds")
    parser.add_argument("--heartbeat-scale", type=_positive, default=1.0, help="multiply the server's interval")
    parser.add_argument("--jitter", type=float, default=0.1, help="+/- fraction of jitter on each interval")
    parser.add_argument("--restart-delay", type=_non_negative, default=1.0, help="seconds a restart takes")
    parser.add_argument("--restart-jitter", type=_non_negative, default=0.0, help="extra random restart seconds")
    parser.add_argument("--fail-share", type=_share, help="share of agents (seeded) that fail their upgrades")
    parser.add_argument("--fail-version", help="upgrades to this version fail (for --fail-share, or all agents)")
    parser.add_argument("--fail-mode", choices=FAIL_MODES, default=NEVER_REJOIN)
    parser.add_argument("--offline-share", type=_share, default=0.0, help="share of agents (seeded) that never join")
    parser.add_argument("--sequences", type=_sequences, help="known release sequences: 1.0.0=1,1.1.0=2 or @file.json")
    parser.add_argument("--duration", type=_positive, help="stop after this many seconds (default: until a signal)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stats-every", type=_positive, default=5.0, help="seconds between status lines")
    parser.add_argument(
        "--max-connections", type=int, help="HTTP connection pool size and in-flight limit (default: 8 to 16)"
    )
    parser.add_argument("--leave-on-exit", action="store_true", help="agents leave their sessions when stopping")


async def run_cli(options: argparse.Namespace, out: IO[str] | None = None) -> int:
    """Enroll (optionally) and run the agents as the command line asks; returns the exit status."""
    out = out or sys.stdout

    def say(line: str) -> None:
        out.write(line + "\n")
        with contextlib.suppress(AttributeError, ValueError):
            out.flush()

    pools = [name.strip() for name in (options.pools or "").split(",") if name.strip()]
    if options.enroll:
        if not options.api_key:
            raise SimulatorError("--enroll needs --api-key")
        if not options.count:
            raise SimulatorError("--enroll needs --count")
        nodes = await enroll(
            options.server,
            options.api_key,
            options.count,
            pools=pools,
            create_pools=options.create_pools,
            name_prefix=options.name_prefix,
            arch=options.arch,
        )
        if options.tokens_file:
            write_tokens(options.tokens_file, nodes)
            say(f"enrolled {len(nodes)} nodes into {', '.join(pools)}; tokens written to {options.tokens_file}")
        else:
            say(f"enrolled {len(nodes)} nodes into {', '.join(pools)} (no --tokens-file: tokens not kept)")
        tokens = [(node.name, node.token) for node in nodes]
    elif options.tokens_file:
        tokens = read_tokens(options.tokens_file)
        if options.count:
            if options.count > len(tokens):
                raise SimulatorError(f"--count {options.count} but {options.tokens_file} has {len(tokens)} tokens")
            tokens = tokens[: options.count]
    else:
        raise SimulatorError("give --tokens-file (existing agent tokens) or --enroll --api-key KEY --count N")

    configs = build_agent_configs(
        tokens,
        daemon_version=options.daemon_version,
        protocol_version=options.protocol_version,
        fail_share=options.fail_share,
        fail_version=options.fail_version,
        fail_mode=options.fail_mode,
        offline_share=options.offline_share,
        seed=options.seed,
    )
    fleet = Fleet(
        options.server,
        configs,
        api_key=options.api_key,
        sequences=options.sequences,
        heartbeat_seconds=options.heartbeat_seconds,
        heartbeat_scale=options.heartbeat_scale,
        jitter=options.jitter,
        restart_delay=options.restart_delay,
        restart_jitter=options.restart_jitter,
        seed=options.seed,
        max_connections=options.max_connections,
        spec_min_protocol_version=options.spec_min_protocol_version,
        leave_on_stop=options.leave_on_exit,
    )
    failing = sum(1 for config in configs if config.fail_mode)
    offline = sum(1 for config in configs if config.offline)
    failure = f"{failing} fail their upgrades ({options.fail_mode}"
    failure += f" on {options.fail_version})" if options.fail_version else ")"
    say(f"simulating {len(configs)} agents against {options.server}: {offline} offline, {failure}")

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, fleet.stop)

    async def report() -> None:
        while await fleet.sleep(options.stats_every):
            say(fleet.status_line())

    try:
        running = asyncio.create_task(fleet.run(timeout=options.duration))
        while fleet._stop_future is None and not running.done():  # let run() set up before report() starts
            await asyncio.sleep(0)
        reporter = asyncio.create_task(report())
        await running
        await reporter
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
    say(fleet.status_line())
    stats = fleet.stats
    say(
        f"done: {stats.heartbeats} heartbeats, {stats.joins} joins, {stats.upgrades} upgrades,"
        f" {stats.failed_upgrades} failed upgrades, {stats.refusals} refusals,"
        f" {stats.downloads} downloads ({stats.download_cache_hits} from cache), {stats.errors} errors"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m project.fleet.simulator", description=__doc__.split("\n")[0])
    add_arguments(parser)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(run_cli(options))
    except SimulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
