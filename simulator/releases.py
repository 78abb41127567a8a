"""What agents share about releases: one download per binary (BinaryCache) and release sequences (SequenceBook)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import httpx

from simulator.config import MAX_LIST_PAGES, RELEASES_PATH, list_page
from simulator.stats import FleetStats

if TYPE_CHECKING:  # the fleet holds its agents; only the type is needed here
    from simulator.fleet import Fleet


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
