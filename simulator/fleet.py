"""N simulated agents in one asyncio loop over one HTTP client, and a thread to run them from synchronous code."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from simulator.agent import Agent
from simulator.config import DEFAULT_HEARTBEAT_SECONDS, SPEC_MIN_PROTOCOL_VERSION, AgentConfig
from simulator.connection import AgentConnection, Answer
from simulator.downloads import AgentDownloads, Downloads, Fetched, OnConnection, SharedDownloads, downloads_client
from simulator.retry import BACKOFF, RETRIES, cut, told_to_wait
from simulator.stats import FleetStats, FleetStatus
from simulator.stopping import Stopper
from simulator.thread import FleetThread

logger = logging.getLogger(__name__)


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


class Fleet(FleetStatus):
    """N simulated agents sharing one ``httpx.AsyncClient`` (HTTP/1.1, keep-alive).

    Arguments:
    - ``base_url``: the server, e.g. ``http://127.0.0.1:8000``;
    - ``agents``: one ``AgentConfig`` per agent;
    - ``release_pins``, ``release_threshold``: what every agent's installation trusts (root 1 of the
      key chain): agents run only releases these keys signed (simulator/trust.py);
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
    - ``download_rate``: bytes/s per agent downloading (None: as fast as the link); each agent
      downloads its own bytes on its own connection, unless ``shared_downloads`` (one fetch per
      binary for the whole fleet: control-plane benchmarks); ``download_timeout``: seconds a
      download may wait for its next bytes (see simulator/downloads.py);
    - ``client``: an ``httpx.AsyncClient`` to use instead of creating one;
    - ``watch``: session requests carry ``wait`` (the interval, 1-60 s) and ``seen``: the server holds them until
      the spec changes; each agent then makes all its calls on a connection of its own (``connection``), and its
      downloads on one opened for each (docs/simulator.md, "Watching");
    - ``retry``: ``"backoff"``, the agent protocol's retries, or ``"fixed"``, the old ones (simulator/retry.py).
    """

    def __init__(
        self,
        base_url: str,
        agents: Sequence[AgentConfig],
        *,
        release_pins: Sequence[str] = (),
        release_threshold: int = 1,
        heartbeat_seconds: float | None = None,
        heartbeat_scale: float = 1.0,
        jitter: float = 0.1,
        start_spread: float | None = None,
        restart_delay: float = 1.0,
        restart_jitter: float = 0.0,
        seed: int = 0,
        request_timeout: float = 10.0,
        download_timeout: float = 60.0,
        download_rate: float | None = None,
        shared_downloads: bool = False,
        max_connections: int | None = None,
        spec_min_protocol_version: int = SPEC_MIN_PROTOCOL_VERSION,
        leave_on_stop: bool = False,
        record_latencies: bool = False,
        client: httpx.AsyncClient | None = None,
        watch: bool = False,
        retry: str = BACKOFF,
    ):
        if not 0 <= jitter < 1:
            raise ValueError("jitter is a fraction in [0, 1)")
        if heartbeat_seconds is not None and heartbeat_seconds <= 0:
            raise ValueError("heartbeat_seconds must be positive")
        if download_rate is not None and download_rate <= 0:
            raise ValueError("download_rate is a positive number of bytes per second")
        if heartbeat_scale <= 0 or restart_delay < 0 or restart_jitter < 0:
            raise ValueError("heartbeat_scale must be positive; restart delays must be >= 0")
        if retry not in RETRIES:
            raise ValueError(f"retry is one of {', '.join(RETRIES)}")
        self.base_url = base_url.rstrip("/")
        self.release_pins = tuple(release_pins)
        self.release_threshold = release_threshold
        self.heartbeat_override = heartbeat_seconds
        self.heartbeat_scale = heartbeat_scale
        self.jitter = jitter
        self._start_spread = start_spread
        self.restart_delay = restart_delay
        self.restart_jitter = restart_jitter
        self.seed = seed
        self.request_timeout = request_timeout
        self.download_timeout = download_timeout
        self.download_rate = download_rate
        self.shared_downloads = shared_downloads
        self.spec_min_protocol_version = spec_min_protocol_version
        self.leave_on_stop = leave_on_stop
        self.record_latencies = record_latencies
        self.watch = watch
        self.retry = retry
        self._rng = random.Random(f"{seed}:fleet")  # noqa: S311 - jitter, not security
        self._connections: dict[int, AgentConnection] = {}
        self.max_connections = max_connections or default_max_connections(
            sum(1 for config in agents if not config.offline)
        )
        self.stats = FleetStats()
        self.agents = [Agent(self, config, index) for index, config in enumerate(agents)]
        self.agent_count = len(self.agents)
        self._given_client = client
        self._client: httpx.AsyncClient | None = None
        self.binaries: Downloads
        self._agent_downloads: AgentDownloads  # each agent's own bytes (``binaries`` unless shared_downloads)
        self._ssl_context: ssl.SSLContext
        self._gate: asyncio.Semaphore
        self.stopper = Stopper()  # every sleep and held request woken at once, from any thread
        self.started_at: float | None = None
        self.finished = threading.Event()

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

    def census(self) -> tuple[int, Counter, Counter]:
        """``online_count()``, ``versions()`` and ``states()`` in one pass over the agents (a shard reports them
        twice a second, from the loop its agents run on)."""
        online, versions, states = 0, Counter[str](), Counter[str]()
        for agent in self.agents:
            states[str(agent.state)] += 1
            if agent.online:
                online += 1
                versions[agent.version] += 1
        return online, versions, states

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
    ) -> httpx.Response | Answer | None:
        """One API call; a failure is counted (on the agent too) and answers None.

        With ``final_4xx`` a 4xx answer is counted as an error but returned, so the caller does not retry what
        the server will never accept. A 429, or a 503 with ``Retry-After``, is not a failure: the call is sent
        again after it (``stats.throttled``, ``stats.overloaded``), or answers None if the fleet stops meanwhile;
        a held request cut is sent again at once, once (``stats.cut_retries``): simulator/retry.py."""
        assert self._client is not None, "the fleet is not running"
        url = path if "://" in path else self.base_url + path  # a list's `next` link is used as is
        headers = {"Authorization": f"Bearer {token}"}
        held = self.retry == BACKOFF and isinstance(json, dict) and "wait" in json
        rng = None if self.retry != BACKOFF else agent.rng if agent is not None else self._rng  # Retry-After's jitter
        while True:
            try:
                response = await self._send(method, url, json=json, headers=headers, agent=agent)
            except httpx.HTTPError as exc:
                if held and cut(exc):
                    held = False
                    self.stats.cut_retries += 1
                    continue
                detail = f"{type(exc).__name__}: {exc}"[:300]
                self._error(f"{kind}_{type(exc).__name__}", detail, agent)
                return None
            if response is None:  # the fleet stopped during a held request
                return None
            self.stats.answers[response.status_code] += 1
            wait = told_to_wait(response, rng=rng)
            if wait is None:
                break
            # Over the credential's limit, or the server busy: the same request after Retry-After (out of the gate).
            self.stats.throttled += response.status_code == 429
            self.stats.overloaded += response.status_code != 429
            if self.record_latencies:
                self.stats.retry_waits.append(wait)
            if not await self.sleep(wait):
                return None
        if response.is_success:
            return response
        detail = f"HTTP {response.status_code}: {response.text[:200]}"
        self._error(f"{kind}_{response.status_code}", detail, agent)
        if final_4xx and 400 <= response.status_code < 500:
            return response
        return None

    async def _send(
        self, method: str, url: str, *, json: Any, headers: dict[str, str], agent: Agent | None
    ) -> httpx.Response | Answer | None:
        """One HTTP exchange; None when the fleet stopped while a held request waited."""
        own = self.connection(agent)
        if own is not None and isinstance(json, dict) and "wait" in json:
            # A held request occupies its connection for up to `wait`; stopping the fleet cancels it at once. When
            # it is cut, request() decides whether to send it again (not the connection, as for another request).
            exchange = own.request(method, url, json=json, headers=headers, replace_closed=self.retry != BACKOFF)
            return await self.stopper.held(exchange)
        if own is not None:  # the agent's other calls: its one connection, outside the gate
            return await own.request(method, url, json=json, headers=headers)
        assert self._client is not None, "the fleet is not running"
        async with self._gate:
            return await self._client.request(method, url, json=json, headers=headers)

    def _error(self, kind: str, detail: str, agent: Agent | None) -> None:
        logger.debug("simulator: %s %s", kind, detail)
        if agent is not None:
            agent._failed(kind, detail)
        else:
            self.stats.error(kind)

    # -- running -------------------------------------------------------------------------

    async def sleep(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; False (at once) when the fleet is stopping."""
        return await self.stopper.sleep(delay)

    @property
    def stopping(self) -> bool:
        return self.stopper.requested

    def stop(self) -> None:
        """Ask the fleet to stop; safe from any thread and from signal handlers."""
        self.stopper.stop()

    def connection(self, agent: Agent | None) -> AgentConnection | None:
        """A watching agent's own connection, as a node has one, for all its API calls (its held requests, its
        other session calls, acks, release roots): simulator/connection.py. None for a polling agent (the
        shared pool)."""
        if not self.watch or agent is None:
            return None
        connection = self._connections.get(agent.index)
        if connection is None:
            connection = self._connections[agent.index] = AgentConnection(
                self.base_url,
                timeout=self.request_timeout + 60,
                # A round's restarted agents all connect at once: on a loaded machine a SYN is sometimes
                # answered only after the client sends it again (at 1, 3 and 7 s); 5 s failed some joins.
                connect_timeout=self.request_timeout,
                ssl_context=self._ssl_context,
            )
        return connection

    async def fetch_binary(self, agent: Agent, url: str, sha256: str) -> Fetched:
        """The agent's download of ``url`` (simulator/downloads.py). A watching agent downloads from the server on
        its own connection, as a node's client reuses its keep-alive connection; paced at ``download_rate``, or on
        another origin, on a connection opened for the download (not the shared downloads client: its pool would
        grow to one connection per download under way, and httpcore's work per request grows with its pool)."""
        if not self.watch or self.shared_downloads:
            return await self.binaries.fetch(url, sha256, holder=agent.index)
        own = self.connection(agent)
        if self.download_rate is None and own is not None and own.reaches(url):
            on_connection = OnConnection(own, elsewhere=self._download_client)
            return await self._agent_downloads.fetch(url, sha256, holder=agent.index, client=on_connection)
        async with self._download_client() as client:
            return await self._agent_downloads.fetch(url, sha256, holder=agent.index, client=client)

    def _download_client(self) -> httpx.AsyncClient:
        """A client for one watching agent's download: a connection of its own, paced at ``download_rate``."""
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=5.0)
        return downloads_client(self.download_rate, limits=limits, verify=self._ssl_context)

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
        until ``stop()``, even when every agent is down or offline for good.
        """
        loop = asyncio.get_running_loop()
        self.stopper.start(loop)
        client = self._given_client or self._make_client()
        self._client = client
        self._ssl_context = httpx.create_ssl_context()  # one for every agent's own client: building one is costly
        self._gate = asyncio.Semaphore(self.max_connections)
        # Downloads never queue behind heartbeats (nor hold their connections): a client of their own.
        downloads = self._given_client or downloads_client(self.download_rate)
        fetcher = AgentDownloads(downloads, self.stats, rate=self.download_rate, timeout=self.download_timeout)
        self._agent_downloads = fetcher
        self.binaries = SharedDownloads(fetcher, self.stats) if self.shared_downloads else fetcher
        self.started_at = time.monotonic()
        tasks = [asyncio.create_task(agent.run(), name=f"agent:{agent.name}") for agent in self.agents]
        deadline = None if timeout is None else loop.time() + timeout
        met = False
        try:
            while True:
                if until is not None and until(self):
                    met = True
                    break
                if self.stopper.done:
                    break
                wait = poll if deadline is None else min(poll, deadline - loop.time())
                if wait <= 0:
                    break
                await self.stopper.wait(wait)
        finally:
            self.stopper.wake_all()
            if tasks:
                # Agents return at their next sleep; give in-flight calls a moment, then cancel.
                _, pending = await asyncio.wait(tasks, timeout=max(2.0, self.request_timeout / 2))
                for task in pending:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if self._given_client is None:
                await client.aclose()
                await downloads.aclose()
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()
            self.finished.set()
        return met

    def start_thread(self, timeout: float | None = None) -> FleetThread:
        """Run the fleet on its own event loop in a background thread (for synchronous callers)."""
        return FleetThread(self, timeout=timeout).start()
