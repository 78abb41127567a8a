"""One simulated bcd agent: join, heartbeat, upgrade on spec.daemon or daemon.upgrade, verify what it runs."""

from __future__ import annotations

import enum
import logging
import random
import time
from typing import Any

import httpx

from rollout.release.agent import DOWNLOAD_FAILED, Refused
from simulator.agent_fleet import AgentFleet
from simulator.config import (
    ACK_PATH,
    DEFAULT_HEARTBEAT_SECONDS,
    NEVER_REJOIN,
    REJOIN_OLD,
    SESSION_PATH,
    UPGRADE_COMMAND,
    AgentConfig,
    AgentState,
)
from simulator.downloads import Corrupt, fetch_expected
from simulator.refusals import Refusals
from simulator.retry import FIXED, backoff
from simulator.stats import Refusal, Upgrade
from simulator.trust import RootsUnavailable, Trust

logger = logging.getLogger(__name__)

#: 4xx answers that say "later", not "never": retried at the next beat like a 5xx.
RETRIED_4XX = (408, 429)


class _Verdict(enum.Enum):
    CURRENT = "current"  # already runs that version
    GO = "go"  # binary downloaded and verified: restart into it
    REFUSED = "refused"  # will not run it (recorded once)
    RETRY = "retry"  # could not decide now (download failed): try again at the next beat


class Agent:
    """A simulated bcd. Its public attributes are the observable state (read them from any thread)."""

    def __init__(self, fleet: AgentFleet, config: AgentConfig, index: int):
        self.fleet = fleet
        self.config = config
        self.index = index
        self.name = config.name or f"agent-{index}"
        self.version = config.daemon_version
        self.state = AgentState.OFFLINE if config.offline else AgentState.JOINING
        self.heartbeat_seconds: float | None = None  # the server's last answer
        self.spec: dict | None = None  # the server's last spec
        self.revision: str | None = None  # the server's last specRevision (what a watching agent has seen)
        self.heartbeats = 0
        self.joins = 0
        self.errors = 0
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.upgrades: list[Upgrade] = []  # every restart into a new binary, successful or not
        self.refused = Refusals(self.name, fleet.stats)
        self.acked: dict[str, bool] = {}  # command id -> ok
        self.trust = Trust(
            self, pins=fleet.release_pins, threshold=fleet.release_threshold, confirmed=config.confirmed_sequence
        )
        self._session_open = False
        self._pending_confirm: str | None = None
        # When (time.monotonic()) it leaves for a while, and for how long: flap after upgrade, down_after.
        self._away_at: float | None = None
        self._away_for = 0.0
        self._flapped = False
        self.aways = 0  # how many times it went away and came back
        # Jitter only, never security: a seeded PRNG makes runs reproducible.
        self.rng = random.Random(f"{fleet.seed}:{index}:{config.token}")  # noqa: S311
        self.answered_at: float | None = None  # time.monotonic() of the last session answer
        self._early = 0  # held requests in a row answered at once with nothing changed (a server stopping)

    # -- observable helpers --------------------------------------------------------------

    @property
    def upgrades_done(self) -> int:
        return sum(1 for upgrade in self.upgrades if upgrade.outcome == "upgraded")

    @property
    def failed_upgrades(self) -> list[Upgrade]:
        return [upgrade for upgrade in self.upgrades if upgrade.outcome != "upgraded"]

    @property
    def confirmed_sequence(self) -> int | None:
        """The highest release sequence it confirmed (simulator/trust.py): it refuses any lower."""
        return self.trust.confirmed

    @property
    def refusals(self) -> list[Refusal]:
        return self.refused.all

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
        if not await fleet.sleep(self.rng.uniform(0, fleet.start_spread())):
            return
        if self.config.down_after is not None:
            self._away_at, self._away_for = time.monotonic() + self.config.down_after, self.config.down_for
        while True:
            due = self._away_at is not None and time.monotonic() >= self._away_at
            if due and not await self._go_away():
                break
            try:
                delay = await self._beat()
            except Exception as exc:  # an agent bug must not take the fleet down
                logger.exception("simulated agent %s failed a beat", self.name)
                self._failed("internal", repr(exc))
                delay = self._interval()
            if delay is not None and self._away_at is not None:
                delay = min(delay, max(0.0, self._away_at - time.monotonic()))
            if delay is None or not await fleet.sleep(delay):
                break
        if fleet.leave_on_stop and self._session_open and self.state != AgentState.DOWN:
            await self._leave()

    async def _go_away(self) -> bool:
        """Leave (when joined) and stay away ``_away_for`` seconds; False when the fleet stops meanwhile."""
        seconds, self._away_at = self._away_for, None
        if self._session_open:
            await self._leave()
        self.state = AgentState.AWAY
        logger.info("simulated agent %s goes away for %.1f s", self.name, seconds)
        back = await self.fleet.sleep(seconds)
        self.state = AgentState.JOINING
        self.aways += 1
        return back

    def _base_interval(self) -> float:
        fleet = self.fleet
        if fleet.heartbeat_override is not None:
            return fleet.heartbeat_override
        return (self.heartbeat_seconds or DEFAULT_HEARTBEAT_SECONDS) * fleet.heartbeat_scale

    def _interval(self) -> float:
        fleet = self.fleet
        return max(0.001, self._base_interval() * self.rng.uniform(1 - fleet.jitter, 1 + fleet.jitter))

    def _failed(self, kind: str, detail: str) -> None:
        self.errors += 1
        self.consecutive_failures += 1
        self.last_error = f"{kind}: {detail}"
        self.fleet.stats.error(kind)

    async def _beat(self) -> float | None:
        """One heartbeat and what it brings; returns the delay before the next one (None: stay down)."""
        fleet = self.fleet
        started = time.perf_counter()
        sent: dict[str, Any] = {"daemonVersion": self.version, "protocolVersion": self.config.protocol_version}
        # --- watch (docs/simulator.md "Watching"): the request is held until the spec changes or `wait` passes.
        # A join carries `wait` without `seen`: the server takes it for a join at once (docs/fleet.md#watch).
        wait = watch_wait(self._base_interval()) if fleet.watch else None
        if wait is not None:
            sent.update(wait=wait, **({"seen": self.revision} if self.revision and self._session_open else {}))
        refused = self.refused.to_report
        if refused is not None:
            sent["refused"] = refused
        response = await fleet.request(
            "POST",
            SESSION_PATH,
            self.config.token,
            json=sent,
            kind="session",
            agent=self,
            final_4xx=refused is not None,
        )
        if response is None:
            return self._after_failure()  # a refusal not heard yet goes again with the next beat
        self.refused.to_report = None
        if not response.is_success:
            return self._interval()  # the server would not take the refusal (counted as an error)
        if fleet.record_latencies:
            fleet.stats.latencies.append(time.perf_counter() - started)
            fleet.stats.round_trips.append(response.elapsed.total_seconds())
        try:
            answer = response.json()
            spec = answer.get("spec") or {}
            commands = answer.get("commands") or []
            heartbeat_seconds = answer.get("heartbeatSeconds")
            root_version = answer.get("rootVersion")
            if not isinstance(spec, dict) or not isinstance(commands, list):
                raise TypeError("spec must be an object and commands a list")
        except (ValueError, TypeError, AttributeError) as exc:
            self._failed("session_bad_body", str(exc))
            return self._interval()

        fleet.stats.heartbeats += 1
        self.heartbeats += 1
        self.consecutive_failures = 0
        self.answered_at = time.monotonic()
        if not self._session_open:
            self._session_open = True
            self.joins += 1
            fleet.stats.joins += 1
            upgraded = self._pending_confirm is not None
            self.trust.confirm_installed(self.version)
            self._pending_confirm = None
            if upgraded and self.config.flap_after is not None and not self._flapped:
                # Flap after upgrade (once): stay a moment on the new version, then leave and return.
                self._flapped = True
                self._away_at, self._away_for = time.monotonic() + self.config.flap_after, self.config.flap_down
        self.state = AgentState.ONLINE
        if isinstance(heartbeat_seconds, int | float) and heartbeat_seconds > 0:
            self.heartbeat_seconds = float(heartbeat_seconds)
        if isinstance(root_version, int) and not isinstance(root_version, bool):
            self.trust.announced = root_version
        self.spec = spec
        seen, revision = sent.get("seen"), answer.get("specRevision")
        self.revision = revision if isinstance(revision, str) else None
        # Watching: ask again at once (after a join too), unless the server did not hold an unchanged answer.
        held = wait is None or revision != seen or time.perf_counter() - started >= min(1.0, wait / 2)
        self._early = 0 if held else self._early + 1

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
        if not fleet.watch or self.revision is None:
            return self._interval()
        return 0.0 if held else self._after_early_answer()

    def _after_failure(self) -> float:
        """The delay after a failed session call (docs/fleet.md#retries): exponential backoff with full jitter, capped
        at the interval; ``retry="fixed"``: the interval."""
        if self.fleet.retry == FIXED:
            return self._interval()
        return backoff(self.consecutive_failures, cap=self._base_interval(), rng=self.rng)

    def _after_early_answer(self) -> float:
        """A held request answered at once with nothing changed (its web process stopping, or a server that does
        not hold): asked again at once, once, as a cut one; then backoff. ``retry="fixed"``: the interval."""
        if self.fleet.retry == FIXED:
            return self._interval()
        return 0.0 if self._early == 1 else backoff(self._early - 1, cap=self._base_interval(), rng=self.rng)

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
            # Given up for good, or (a failed download) the refusal just recorded.
            await self._ack(command_id, ok=False, error=self.refused.why(section))
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

    def _refuse(self, section: Any, reason: str, detail: str, *, report: bool = False, final: bool = True) -> _Verdict:
        self.refused.refuse(section, reason, detail, report=report, final=final)
        return _Verdict.REFUSED

    async def _consider(self, section: Any) -> _Verdict:
        """Decide on a daemon section; on GO the verified binary is ready."""
        if not _valid_section(section):
            if self.refused.given_up(section):
                return _Verdict.REFUSED
            return self._refuse(section, "invalid_section", f"not a daemon section: {section!r}"[:200])
        version, url = section["version"], section["url"]
        if version == self.version:
            self.trust.learn_running(section)
            return _Verdict.CURRENT
        if self.refused.given_up(section):
            return _Verdict.REFUSED
        platform = f"linux-{self.config.arch}"
        try:  # what the release keys signed, before a byte is downloaded (docs/signing.md)
            trusted = await self.trust.verify(section)
            binary = trusted.binary_for(platform)
        except Refused as refused:
            return self._refuse(section, refused.code, refused.detail, report=True)
        except RootsUnavailable as exc:
            self._failed("release_roots", f"{version}: {exc}")
            return _Verdict.RETRY
        previous_state, self.state = self.state, AgentState.UPGRADING
        try:  # the digest and size of the bytes this agent received (simulator/downloads.py)
            expected = str(section.get("sha256") or binary.sha256)  # what the server meant to send
            fetched = await fetch_expected(lambda: self.fleet.fetch_binary(self, url, expected), expected, self.rng)
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            self._failed("download", f"{status} for {url}")
            if 400 <= status < 500 and status not in RETRIED_4XX:  # no retry can help: say so (docs/simulator.md)
                return self._refuse(section, DOWNLOAD_FAILED, f"HTTP {status}", report=True, final=False)
            return _Verdict.RETRY  # a 5xx: the server may recover
        except httpx.HTTPError as exc:
            self._failed("download", f"{type(exc).__name__} for {url}")
            return _Verdict.RETRY  # a cut connection: resumed at the next beat
        except Corrupt as exc:
            self._failed("download", str(exc))
            return self._refuse(section, DOWNLOAD_FAILED, str(exc), report=True, final=False)
        finally:
            self.state = previous_state
        try:  # the bytes against the signed manifest's entry, not spec.daemon.sha256
            trusted.verify_binary(platform=platform, size=fetched.size, sha256=fetched.sha256)
        except Refused as refused:
            return self._refuse(section, refused.code, refused.detail, report=True)
        self.trust.installing = trusted
        return _Verdict.GO

    async def _leave(self) -> None:
        response = await self.fleet.request("DELETE", SESSION_PATH, self.config.token, kind="leave", agent=self)
        self._session_open = False
        self.revision = None  # a restarted agent has seen nothing yet
        if response is not None:
            self.fleet.stats.leaves += 1

    async def _restart_into(self, section: dict, source: str) -> float | None:
        """Leave, "restart", and come back on the new binary (or fail as configured)."""
        fleet = self.fleet
        old, new = self.version, section["version"]
        # The real bcd restarts even when it cannot tell the server: the session then times out.
        await self._leave()
        self.state = AgentState.RESTARTING
        delay = fleet.restart_delay + self.rng.uniform(0, fleet.restart_jitter)
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
            self.refused.give_up(section, "rejoin_old: the new binary did not stay up")
            return 0.0
        fleet.stats.upgrades += 1
        self.version = new
        self._pending_confirm = new
        return 0.0


def watch_wait(interval: float) -> int:
    """A watching agent's ``wait``: its heartbeat interval, in whole seconds from 1 to 60 (the server's bounds)."""
    return max(1, min(60, round(interval)))


def _valid_section(section: Any) -> bool:
    return isinstance(section, dict) and all(
        isinstance(section.get(key), str) and section.get(key) for key in ("version", "url")
    )
