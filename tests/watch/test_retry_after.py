"""The ``Retry-After`` an overloaded web process gives (fleet/watch/admission.py): the refused agents are told the
seconds to come, each second as many as the process answered in its last one (at least its bound), up to
``heartbeatSeconds``; past that, the least promised second. On the process's own event loop, with a clock the
test moves."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from fleet.watch.admission import Admission, held


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Requests:
    """Requests to an ``Admission``: each is under way until the test lets it go (or marks it held)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.answers: list[tuple[int, dict[str, str], dict]] = []
        self.go: dict[int, asyncio.Event] = {}
        self.hold: set[int] = set()
        self.tasks: list[asyncio.Task[None]] = []

    def send(self) -> int:
        number = len(self.tasks)
        self.go[number] = asyncio.Event()

        async def handler(scope, receive, send) -> None:
            if number in self.hold:
                held()
            await self.go[number].wait()

        async def send_message(message) -> None:
            if message["type"] == "http.response.start":
                headers = {name.decode(): value.decode() for name, value in message["headers"]}
                self.answers.append((message["status"], headers, {}))
            else:
                self.answers[-1][2].update(json.loads(message["body"]))

        self.tasks.append(asyncio.ensure_future(self.admission.serve(handler, {}, None, send_message)))
        return number

    def retry_afters(self) -> list[int]:
        return [int(headers["retry-after"]) for status, headers, _ in self.answers if status == 503]


def run(test) -> None:
    async def main() -> None:
        await test()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()

    asyncio.run(main())


def test_refused_agents_are_spread_over_the_seconds_the_process_needs():
    async def test() -> None:
        clock = Clock()
        admission = Admission(bound=2, longest=lambda: 10, clock=clock)
        requests = Requests(admission)
        requests.send(), requests.send()
        await asyncio.sleep(0)
        assert admission.in_progress == 2
        for _ in range(7):
            requests.send()
        await asyncio.sleep(0)
        # Nothing answered yet: a second holds the bound's worth of returns.
        assert requests.retry_afters() == [1, 1, 2, 2, 3, 3, 4]
        _status, headers, body = requests.answers[0]
        assert body == {"code": "overloaded", "detail": body["detail"], "retryAfter": 1}
        assert headers["content-type"] == "application/json"
        assert "x-frame-options" in headers

        # In the next whole second the process answers 10 (the two under way, then eight more, one by one).
        clock.now = 1001.0
        requests.go[0].set(), requests.go[1].set()
        await asyncio.sleep(0)
        for _ in range(8):
            number = requests.send()
            requests.go[number].set()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert admission.in_progress == 0
        # A second later, two under way and 25 refused: a second now takes 10 returns, less those promised at 1000
        # (two for 1003, one for 1004).
        clock.now = 1002.0
        requests.send(), requests.send()
        requests.answers.clear()
        for _ in range(25):
            requests.send()
        await asyncio.sleep(0)
        assert Counter(requests.retry_afters()) == {1: 8, 2: 9, 3: 8}

    run(test)


def test_past_heartbeat_seconds_the_least_promised_second_is_told():
    async def test() -> None:
        admission = Admission(bound=1, longest=lambda: 3, clock=Clock())
        requests = Requests(admission)
        requests.send()
        for _ in range(9):
            requests.send()
        await asyncio.sleep(0)
        assert requests.retry_afters() == [1, 2, 3, 1, 2, 3, 1, 2, 3]  # never more than an interval

    run(test)


def test_a_held_request_no_longer_counts_and_an_answered_one_gives_its_place_back():
    async def test() -> None:
        admission = Admission(bound=1, longest=lambda: 10, clock=Clock())
        requests = Requests(admission)
        requests.hold.add(0)
        requests.send()
        await asyncio.sleep(0)
        assert admission.in_progress == 0  # held: no load
        under_way = requests.send()
        await asyncio.sleep(0)
        assert admission.in_progress == 1
        requests.send()
        await asyncio.sleep(0)
        assert [status for status, _, _ in requests.answers] == [503]
        requests.go[under_way].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert admission.in_progress == 0
        requests.send()
        await asyncio.sleep(0)
        assert admission.in_progress == 1
        assert len(requests.answers) == 1

    run(test)


def test_no_bound_takes_everything():
    async def test() -> None:
        admission = Admission(bound=0, clock=Clock())
        requests = Requests(admission)
        for _ in range(100):
            requests.send()
        await asyncio.sleep(0)
        assert admission.in_progress == 100
        assert requests.answers == []

    run(test)


@pytest.mark.parametrize(("value", "errors"), [(256, []), (0, []), (-1, ["fleet.E008"]), ("many", ["fleet.E008"])])
def test_the_bound_is_an_integer_of_zero_or_more(settings, value, errors):
    from fleet.checks import check_positive_integers

    settings.WEB_SESSIONS_IN_PROGRESS = value
    assert [message.id for message in check_positive_integers()] == errors
