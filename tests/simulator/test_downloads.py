"""The simulator's downloads without a server (httpx.MockTransport): per agent, shared, resumed after a cut."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from simulator import AgentDownloads, FleetStats, SharedDownloads
from tests.simulator.conftest import sha256


def test_shared_downloads_fetch_once_per_url_and_sha256():
    """--shared-downloads: concurrent agents share one fetch; only the digest is kept."""
    calls = []

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        await asyncio.sleep(0.05)
        return httpx.Response(200, content=b"binary")

    async def scenario() -> list:
        stats = FleetStats()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            cache = SharedDownloads(AgentDownloads(client, stats, timeout=5), stats)
            got = await asyncio.gather(*(cache.fetch("http://b/x", "AB" * 32, holder=i) for i in range(100)))
            got.append(await cache.fetch("http://b/x", "ab" * 32, holder=0))  # the same key, any case
            await cache.fetch("http://b/x", "cd" * 32, holder=0)  # another sha256: another entry
        assert (stats.downloads, stats.download_cache_hits, stats.download_bytes) == (2, 100, 12)
        return got

    assert {(fetched.sha256, fetched.size) for fetched in asyncio.run(scenario())} == {(sha256(b"binary"), 6)}
    assert calls == ["http://b/x", "http://b/x"]


def test_per_agent_downloads_fetch_each_agents_bytes_and_keep_only_the_digest():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("range"))
        return httpx.Response(200, content=b"binary", headers={"ETag": '"v1"'})

    async def scenario() -> list:
        stats = FleetStats()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            downloads = AgentDownloads(client, stats, timeout=5)
            got = await asyncio.gather(*(downloads.fetch("http://b/x", "ab" * 32, holder=i) for i in range(3)))
        assert (stats.downloads, stats.download_bytes, stats.download_resumes) == (3, 18, 0)
        return got

    assert {(fetched.sha256, fetched.size) for fetched in asyncio.run(scenario())} == {(sha256(b"binary"), 6)}
    assert calls == [None, None, None]


class CutStream(httpx.AsyncByteStream):
    """A body that stops after ``cut`` bytes with a read error: the link dropped."""

    def __init__(self, data: bytes, cut: int):
        self.data, self.cut = data, cut

    async def __aiter__(self):
        yield self.data[: self.cut]
        raise httpx.ReadError("the link dropped")


@pytest.mark.parametrize(
    ("second", "resumes", "requests"),
    [
        pytest.param("honest", 1, 2, id="206-from-where-it-stopped"),
        pytest.param("ignores-range", 0, 2, id="200-whole-again"),
        pytest.param("other-etag", 0, 3, id="206-of-other-bytes-starts-over"),
        pytest.param("shorter", 0, 3, id="416-starts-over"),
    ],
)
def test_a_cut_download_resumes_only_the_same_bytes(second, resumes, requests):
    data = bytes(range(256)) * 400
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("range"), request.headers.get("if-range")))
        ranged = request.headers.get("range")
        if len(seen) == 1:
            return httpx.Response(200, headers={"ETag": '"v1"', "Content-Length": str(len(data))},
                                  stream=CutStream(data, 40_000))  # fmt: skip
        if ranged is None or second == "ignores-range":
            return httpx.Response(200, content=data, headers={"ETag": '"v1"'})
        if second == "shorter":
            return httpx.Response(416, headers={"Content-Range": "bytes */10"})
        start = int(ranged.removeprefix("bytes=").rstrip("-"))
        etag = '"v2"' if second == "other-etag" else '"v1"'
        headers = {"ETag": etag, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
        return httpx.Response(206, content=data[start:], headers=headers)

    async def scenario():
        stats = FleetStats()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            fetched = await AgentDownloads(client, stats, timeout=5, retry_delay=0).fetch("http://b/x", "00", holder=1)
        return fetched, stats

    fetched, stats = asyncio.run(scenario())
    assert (fetched.sha256, fetched.size) == (sha256(data), len(data))
    assert (stats.downloads, stats.download_resumes, len(seen)) == (1, resumes, requests)
    assert seen[1] == ("bytes=40000-", '"v1"')  # Range from the byte it stopped at, with the ETag it started with
    if second == "honest":
        assert stats.download_bytes == len(data)  # nothing fetched twice


def test_a_failed_download_is_not_cached():
    answers = iter([httpx.Response(503), httpx.Response(200, content=b"ok")])

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda request: next(answers))) as client:
            stats = FleetStats()
            cache = SharedDownloads(AgentDownloads(client, stats, timeout=5), stats)
            with pytest.raises(httpx.HTTPStatusError):
                await cache.fetch("http://b/x", "00")
            return await cache.fetch("http://b/x", "00")

    assert asyncio.run(scenario()).sha256 == sha256(b"ok")
