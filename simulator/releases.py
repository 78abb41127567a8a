"""What agents share about releases: one download per binary (BinaryCache). Each agent still checks the bytes
against the signed manifest itself (simulator/trust.py)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import httpx

from simulator.stats import FleetStats


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
