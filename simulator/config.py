"""What one simulated agent is told to be (token, versions, failure mode), and how a fleet's configs are built."""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

DEFAULT_DAEMON_VERSION = "1.0.0"
DEFAULT_ARCH = "amd64"
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
RELEASE_ROOTS_PATH = "/api/compute/agent/release-roots"
POOLS_PATH = "/api/compute/pools/"
NODES_PATH = "/api/compute/nodes/"
# Lists answer {"results": [...], "next": url | null}; a walk longer than this is a server bug, not a list.
MAX_LIST_PAGES = 10_000


def list_page(body: Any, url: str) -> tuple[list, str | None]:
    """The rows of one page of a list, and the absolute URL of the next page (None on the last).

    ``next`` may be absolute or relative: it is resolved against the page's own URL.
    Raises TypeError, KeyError or ValueError on a body that is not a page.
    """
    if not isinstance(body, dict) or not isinstance(body["results"], list):
        raise TypeError("a list page is an object with a results array")
    following = body["next"]
    if following is not None and not isinstance(following, str):
        raise TypeError("next is a URL or null")
    return body["results"], urljoin(url, following) if following else None


class SimulatorError(Exception):
    """A setup problem the command reports and exits on (bad flags, enrolment refused)."""


class AgentState(enum.StrEnum):
    OFFLINE = "offline"  # configured never to join
    JOINING = "joining"  # has no open session: first join, or rejoin after a restart
    ONLINE = "online"  # its session is open
    UPGRADING = "upgrading"  # downloading and checking a binary
    RESTARTING = "restarting"  # left its session, "restarting" into a new binary
    DOWN = "down"  # never_rejoin: left and stays down
    AWAY = "away"  # left for a while (flap after upgrade, down_after/down_for): it comes back


# --------------------------------------------------------------------------------------
# Configuration of one agent, and the deterministic selection of shares
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentConfig:
    """One simulated node agent.

    ``fail_mode`` (``never_rejoin`` | ``rejoin_old``) applies to every upgrade
    when ``fail_versions`` is None, else only to upgrades to those versions.
    ``confirmed_sequence`` is the highest release sequence the agent has
    confirmed (its installation's state); when None, it learns the sequence of
    the release it runs from its spec once that release verifies, and from
    every release it installs. ``arch``: its platform is ``linux-<arch>``.

    ``flap_after``: after its first upgrade, the agent stays joined on the new
    version this many seconds, then leaves for ``flap_down`` seconds and comes
    back (on the new version): it fails a rollout's readiness (minReadySeconds).
    ``down_after``: this many seconds after it starts, the agent goes offline
    (leaves its session, stops heartbeating) for ``down_for`` seconds, then
    comes back on the version it ran (0: offline from the start, joining only
    after ``down_for``).
    """

    token: str
    name: str = ""
    daemon_version: str = DEFAULT_DAEMON_VERSION
    protocol_version: int = DEFAULT_PROTOCOL_VERSION
    arch: str = DEFAULT_ARCH
    offline: bool = False
    fail_mode: str | None = None
    fail_versions: frozenset[str] | None = None
    confirmed_sequence: int | None = None
    flap_after: float | None = None
    flap_down: float = 5.0
    down_after: float | None = None
    down_for: float = 0.0

    def __post_init__(self) -> None:
        if self.fail_mode is not None and self.fail_mode not in FAIL_MODES:
            raise ValueError(f"fail_mode must be one of {FAIL_MODES}, not {self.fail_mode!r}")
        for name in ("flap_after", "flap_down", "down_after", "down_for"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, not {value!r}")

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
    arch: str = DEFAULT_ARCH,
    confirmed_sequence: int | None = None,
    fail_share: float | None = None,
    fail_version: str | None = None,
    fail_mode: str = NEVER_REJOIN,
    offline_share: float = 0.0,
    flap_share: float = 0.0,
    flap_after: float = 2.0,
    flap_down: float = 5.0,
    down_share: float = 0.0,
    down_after: float = 0.0,
    down_for: float = 30.0,
    seed: int = 0,
) -> list[AgentConfig]:
    """Configs for agents holding ``tokens`` (plain tokens or ``(name, token)`` pairs).

    Failure injection:
    - ``fail_share`` only: that share of the agents fails on any upgrade;
    - ``fail_version`` only: every agent fails when upgrading to that version;
    - both: that share fails, only when upgrading to that version.
    ``flap_share`` of the agents flap after their first upgrade (``AgentConfig.flap_after``);
    ``down_share`` go offline and return later (``AgentConfig.down_after``).
    Agents are selected by name (or token when unnamed) with ``select_share``.
    """
    if fail_mode not in FAIL_MODES:
        raise ValueError(f"fail_mode must be one of {FAIL_MODES}, not {fail_mode!r}")
    agents = [("", item) if isinstance(item, str) else (item[0], item[1]) for item in tokens]
    keys = [name or token for name, token in agents]
    offline = select_share(keys, offline_share, seed=seed, salt="offline")
    flapping = select_share(keys, flap_share, seed=seed, salt="flap")
    going_down = select_share(keys, down_share, seed=seed, salt="down")
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
            arch=arch,
            confirmed_sequence=confirmed_sequence,
            offline=key in offline,
            fail_mode=fail_mode if key in failing else None,
            fail_versions=fail_versions if key in failing else None,
            flap_after=flap_after if key in flapping else None,
            flap_down=flap_down,
            down_after=down_after if key in going_down else None,
            down_for=down_for,
        )
        for key, (name, token) in zip(keys, agents, strict=True)
    ]
