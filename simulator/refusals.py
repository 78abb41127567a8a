"""What a simulated agent will not run, and the refusal it still has to tell the server (docs/signing.md).

A section refused for good (a signature or a sequence it must not trust, a new binary that did not stay up) is
never tried again. A failed download is refused and reported, and tried again when the same section comes again.
A reported refusal goes with the next session call (``refused``), and is dropped once the server took it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from simulator.stats import FleetStats, Refusal

logger = logging.getLogger(__name__)


class Refusals:
    """One agent's refusals: every one made (``all``), the sections given up, the one to report."""

    def __init__(self, agent_name: str, stats: FleetStats) -> None:
        self._agent_name = agent_name
        self._stats = stats
        self.all: list[Refusal] = []
        self.to_report: dict[str, str] | None = None  # sent as ``refused`` on the next session call
        self._given_up: dict[tuple[str, str, str], str] = {}  # section -> why (refused, or failed)

    def refuse(self, section: Any, reason: str, detail: str, *, report: bool = False, final: bool = True) -> None:
        """Do not run this section; with ``report``, say so on the next session call. Not ``final`` (a download
        that failed): the same section offered again later is tried again."""
        version = section.get("version") if isinstance(section, dict) else None
        if report and isinstance(version, str):
            self.to_report = {"version": version, "code": reason, "detail": detail[:1000]}
        if final:
            self.give_up(section, f"{reason}: {detail}")
        self.all.append(Refusal(version=str(version), reason=reason, detail=detail, at=time.time()))
        self._stats.refusals += 1
        logger.info("simulated agent %s refuses %s: %s (%s)", self._agent_name, version, reason, detail)

    def give_up(self, section: Any, why: str) -> None:
        self._given_up[_section_key(section)] = why

    def given_up(self, section: Any) -> bool:
        return _section_key(section) in self._given_up

    def why(self, section: Any) -> str:
        """Why the section is not run: why it was given up, or else the last refusal (a failed download's)."""
        last = self.all[-1] if self.all else None
        return self._given_up.get(_section_key(section)) or (f"{last.reason}: {last.detail}" if last else "refused")


def _section_key(section: Any) -> tuple[str, str, str]:
    if not isinstance(section, dict):
        return ("", "", repr(section))
    return (str(section.get("version")), str(section.get("url")), str(section.get("sha256")).lower())
