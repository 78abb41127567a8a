"""The bridge to Django's threads (fleet/watch/asgi.py ``DjangoOnThreads``): the same answers as a2wsgi's, a small
one handed to the event loop whole without its thread waiting for the loop, a large one streamed."""

from __future__ import annotations

import asyncio
import threading

import a2wsgi.wsgi
import pytest
from a2wsgi import WSGIMiddleware

from fleet.watch.asgi import WHOLE_ANSWER_BYTES, DjangoOnThreads

SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/x",
    "raw_path": b"/x",
    "query_string": b"",
    "root_path": "",
    "headers": [(b"host", b"testserver")],
    "client": ("127.0.0.1", 1234),
    "server": ("127.0.0.1", 80),
}


def app_of(*chunks: bytes, status: str = "200 OK"):
    def app(environ, start_response):
        start_response(status, [("Content-Type", "application/octet-stream"), ("X-Test", "1")])
        return list(chunks)

    return app


async def _empty_receive():
    return {"type": "http.request", "body": b"", "more_body": False}


def answer(bridge_class, app) -> list[dict]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def main():
        await bridge_class(app, workers=2)(dict(SCOPE), _empty_receive, send)

    asyncio.run(main())
    return sent


def whole(messages: list[dict]) -> tuple[int, list, bytes]:
    start = messages[0]
    assert start["type"] == "http.response.start"
    assert all(m["type"] == "http.response.body" for m in messages[1:])
    assert not messages[-1].get("more_body", False)
    return start["status"], start["headers"], b"".join(m.get("body", b"") for m in messages[1:])


@pytest.fixture
def waits_for_the_loop(monkeypatch):
    """How many times a WSGI thread waited for the event loop to take a message."""
    calls = []
    original = a2wsgi.wsgi.asyncio.run_coroutine_threadsafe

    def counted(coroutine, loop):
        calls.append(1)
        return original(coroutine, loop)

    monkeypatch.setattr(a2wsgi.wsgi.asyncio, "run_coroutine_threadsafe", counted)
    return calls


@pytest.mark.parametrize(
    "chunks",
    [(), (b"",), (b"small",), (b"a" * 1000, b"b" * 1000), (b"x" * (WHOLE_ANSWER_BYTES + 1),), (b"y" * 4096,) * 80],
    ids=["no-body", "empty", "small", "two-chunks", "over-the-limit", "many-chunks"],
)
def test_the_same_answer_as_a2wsgi(chunks):
    app = app_of(*chunks, status="206 Partial Content")
    assert whole(answer(DjangoOnThreads, app)) == whole(answer(WSGIMiddleware, app))


def test_a_small_answer_is_handed_over_without_the_thread_waiting_for_the_loop(waits_for_the_loop):
    status, _, body = whole(answer(DjangoOnThreads, app_of(b"a" * 40_000)))
    assert (status, len(body)) == (200, 40_000)
    assert waits_for_the_loop == []
    whole(answer(WSGIMiddleware, app_of(b"a" * 40_000)))
    assert len(waits_for_the_loop) == 3  # a2wsgi: the start, the body, the end


def test_a_large_answer_streams_before_its_thread_is_done():
    first_sent = threading.Event()
    chunk = b"z" * (WHOLE_ANSWER_BYTES + 1)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        yield chunk
        # The next chunk is made only once the client has the first: kept whole, this would never finish.
        assert first_sent.wait(timeout=10), "the first chunk was not sent while the answer was being made"
        yield b"end"

    sent = []

    async def send(message):
        sent.append(message)
        if message.get("body") == chunk:
            first_sent.set()

    async def main():
        await DjangoOnThreads(app, workers=2)(dict(SCOPE), _empty_receive, send)

    asyncio.run(main())
    assert whole(sent)[2] == chunk + b"end"
