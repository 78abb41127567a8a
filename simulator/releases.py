"""What agents share about releases: their sequences (SequenceBook). Downloads: simulator/downloads.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from simulator.config import MAX_LIST_PAGES, RELEASES_PATH, list_page

if TYPE_CHECKING:  # the fleet holds its agents; only the type is needed here
    from simulator.fleet import Fleet


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
        """Fetch the whole releases list, following its ``next`` links; True when every page was read.

        Nothing is learned from a walk that fails part way: the next refresh reads it again.
        """
        url: str | None = self._fleet.base_url + RELEASES_PATH
        learned: dict[str, int] = {}
        for _ in range(MAX_LIST_PAGES):
            if url is None:
                break
            response = await self._fleet.request("GET", url, self._api_key or "", kind="releases")
            if response is None:
                return False
            try:
                rows, url = list_page(response.json(), url)
                learned.update({str(row["version"]): int(row["sequence"]) for row in rows})
            except (ValueError, TypeError, KeyError, AttributeError):
                self._fleet.stats.error("releases_bad_body")
                return False
        else:
            self._fleet.stats.error("releases_too_many_pages")
            return False
        self.known.update(learned)
        self._fleet.stats.release_refreshes += 1
        return True
