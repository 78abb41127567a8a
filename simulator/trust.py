"""What a simulated agent trusts: the release keys its installation pins, and the roots it verified from them.

The checks are the one implementation the real bcd's checklist describes
(``rollout.release.agent``; docs/signing.md#what-an-agent-checks): the agent
follows the root chain from the server (``GET /api/compute/agent/release-roots``,
with its agent token) when a session answer names a newer ``rootVersion``, or
when a release does not verify against the root it holds (the answer's
``rootVersion`` may lag a rotation by a few seconds), then verifies the release
that ``spec.daemon.release`` carries, and after the download the bytes against
the signed manifest. It needs no API key: everything comes with its spec.

It also holds the highest release sequence the agent confirmed (``confirmed``), below which it refuses a release
(``sequence_rollback``): the sequence of a release it installed, once its rejoin is answered, and of the release
its spec names for the version it runs, once that verifies.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rollout.release.agent import BAD_SIGNATURE, AgentTrust, Refused, TrustedRelease
from simulator.config import MAX_LIST_PAGES, RELEASE_ROOTS_PATH, list_page

if TYPE_CHECKING:  # the agent holds its trust; only the types are needed here
    from simulator.agent import Agent
    from simulator.agent_fleet import AgentFleet


class RootsUnavailable(Exception):
    """The root chain could not be read from the server now: decide again at the next beat."""


class Trust:
    """One agent's trust: an ``AgentTrust`` from the fleet's pins and threshold, fed with roots it fetches."""

    def __init__(self, agent: Agent, *, pins: Sequence[str], threshold: int, confirmed: int | None = None) -> None:
        self._agent = agent
        self._trust = AgentTrust(pins=pins, threshold=threshold) if pins else None
        #: The newest root version the server announced (``rootVersion`` of its last answer).
        self.announced = 1
        self.confirmed = confirmed
        self.installing: TrustedRelease | None = None  # verified, downloaded: confirmed at the rejoin
        self._running: tuple[str, int | None] | None = None  # (payload, sequence if it verified) of what it runs

    @property
    def root_version(self) -> int:
        return self._trust.root.version if self._trust is not None else 0

    async def verify(self, section: dict[str, Any]) -> TrustedRelease:
        """Checks 1 to 5 of ``rollout.release.agent`` for the release ``section`` names. Raises ``Refused`` or
        ``RootsUnavailable``."""
        trust = self._trust
        if trust is None:
            raise Refused(BAD_SIGNATURE, "This agent pins no release keys: it runs nothing.")
        followed = False
        if self.announced > trust.root.version:
            await self._follow()
            followed = True
        try:
            return self._check(section, self.confirmed)
        except Refused as refused:
            if refused.code != BAD_SIGNATURE or followed:
                raise
        await self._follow()  # the answer's rootVersion may lag a rotation: ask once before refusing
        return self._check(section, self.confirmed)

    def confirm_installed(self, version: str) -> None:
        """The rejoin was answered on ``version``: the release it installed (verified before the restart) is
        confirmed."""
        installed, self.installing = self.installing, None
        if installed is not None and installed.manifest.version == version:
            self._confirm(installed.manifest.sequence)

    def learn_running(self, section: dict[str, Any]) -> None:
        """Its spec names the version it runs: once that release verifies, its sequence is confirmed.

        Judged once per signed payload (not at every beat), whether it verified or not.
        """
        release = section.get("release")
        payload = release.get("payload") if isinstance(release, dict) else None
        if not isinstance(payload, str) or (self._running is not None and self._running[0] == payload):
            return
        sequence = self.adopt(section)
        self._running = (payload, sequence)
        if sequence is not None:
            self._confirm(sequence)

    def _confirm(self, sequence: int) -> None:
        if self.confirmed is None or sequence > self.confirmed:
            self.confirmed = sequence

    def adopt(self, section: dict[str, Any]) -> int | None:
        """The sequence of the release this agent runs, when its spec names it with a release that verifies."""
        try:
            return self._check(section, None).manifest.sequence
        except Refused:
            return None

    def _check(self, section: dict[str, Any], confirmed_sequence: int | None) -> TrustedRelease:
        assert self._trust is not None
        return self._trust.verify_release(
            section.get("release"),
            version=section["version"],
            confirmed_sequence=confirmed_sequence,
            now=datetime.now(UTC),
        )

    async def _follow(self) -> None:
        """Fetch the roots after the one held, every page, and verify them in order (``bad_root`` at a bad step)."""
        assert self._trust is not None
        agent = self._agent
        fleet: AgentFleet = agent.fleet
        url: str | None = f"{fleet.base_url}{RELEASE_ROOTS_PATH}?after={self._trust.root.version}"
        envelopes: list[Any] = []
        for _ in range(MAX_LIST_PAGES):
            if url is None:
                break
            response = await fleet.request("GET", url, agent.config.token, kind="release_roots", agent=agent)
            if response is None:
                raise RootsUnavailable("GET /api/compute/agent/release-roots failed")
            try:
                rows, url = list_page(response.json(), url)
            except (ValueError, TypeError, KeyError) as exc:
                raise RootsUnavailable(f"the release roots page is malformed: {exc}") from None
            envelopes.extend(rows)
        self._trust.follow(envelopes)
