"""``GET /api/compute/health`` sees a broker that stops within seconds (docs/operations.md#health): 503 with
``"broker": "unavailable"``, and 200 again once it is back. A private redis-server of the test's own, killed
and started again; never the machine's shared one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from demo.processes import wait_until
from tests.brokers import PrivateRabbitMQ, PrivateRedis
from tests.integration.conftest import _app_broker, _app_broker_set

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture
def broker(settings, private_redis) -> Iterator[str]:
    """The stack's broker (tests/integration/conftest.py's ``bare_stack`` asks for it): the private redis-server,
    for the worker and beat, the server's publishing and its health."""
    settings.CELERY_BROKER_URL = private_redis.url
    previous = _app_broker()
    _app_broker_set(private_redis.url, {})
    try:
        yield private_redis.url
    finally:
        _app_broker_set(*previous)


def answer(stack) -> tuple[int, dict]:
    response = httpx.get(f"{stack.url}/api/compute/health", timeout=10)
    return response.status_code, response.json()


def test_a_stopped_broker_is_a_503_within_seconds(bare_stack, private_redis):
    stack, broker = bare_stack, private_redis
    assert stack.env["CELERY_BROKER_URL"] == broker.url
    stack.start_controller()
    wait_until(lambda: answer(stack)[0] == 200, timeout=90, what="a healthy stack")
    assert answer(stack)[1]["broker"] == "ok"

    broker.stop()
    stopped = time.monotonic()
    wait_until(lambda: answer(stack)[0] == 503, timeout=10, poll=0.2, what="the health to see the broker stop")
    assert time.monotonic() - stopped < 5
    status, body = answer(stack)
    assert (status, body["broker"], body["database"]) == (503, "unavailable", "ok")

    broker.start()  # the same port, empty
    wait_until(lambda: answer(stack)[0] == 200, timeout=90, what="the health to see the broker back")
    assert answer(stack)[1]["broker"] == "ok"


def test_a_stopped_rabbitmq_is_a_503_within_seconds(anonymous_api, settings, tmp_path):
    """The same with an amqp:// broker: a private RabbitMQ node, stopped."""
    rabbit = PrivateRabbitMQ(tmp_path)
    rabbit.start()
    try:
        settings.CELERY_BROKER_URL = rabbit.url
        answer = anonymous_api.get("/api/compute/health")
        assert answer.json()["broker"] == "ok", answer.json()
        rabbit.stop()
        stopped = time.monotonic()
        answer = anonymous_api.get("/api/compute/health")
        assert time.monotonic() - stopped < 5
        assert (answer.status_code, answer.json()["broker"]) == (503, "unavailable")
    finally:
        rabbit.stop()
