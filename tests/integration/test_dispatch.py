"""``rollout.dispatch.publish`` against the real brokers: what it sends is in the queue, what is due past the broker's
redelivery horizon is not (docs/operations.md#brokers).

Redis redelivers an unacknowledged message after its visibility timeout (3600 s here), RabbitMQ takes the channel
of a consumer that holds one past its ``consumer_timeout`` (30 min): a message due in 26 minutes is sent on Redis
and not on RabbitMQ. The messages are read back from the broker, on a queue of the test's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import kombu
import pytest
from django.utils import timezone
from kombu import Exchange, Queue

from project import celery_app
from rollout import dispatch

pytestmark = pytest.mark.integration


@pytest.fixture
def queue(broker: str) -> Iterator[kombu.Queue]:
    """A queue of the test's own (each run has a Redis database and a RabbitMQ vhost of its own), declared on the
    broker and empty, where the app publishes; deleted afterwards."""
    name = "test-dispatch"
    declared = Queue(name, Exchange(name, type="direct"), routing_key=name)
    previous = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = name
    with kombu.Connection(broker) as connection:
        declared(connection.default_channel).declare()
        declared(connection.default_channel).purge()  # what an interrupted run left
    try:
        yield declared
    finally:
        celery_app.conf.task_default_queue = previous
        with kombu.Connection(broker) as connection:
            declared(connection.default_channel).delete()
            declared.exchange(connection.default_channel).delete()


def queued(broker: str, queue: kombu.Queue) -> list[tuple[str, list, datetime | None]]:
    """Every message in ``queue``, taken off it: (task name, args, eta)."""
    found = []
    with kombu.Connection(broker) as connection:
        bound = queue(connection.default_channel)
        while (message := bound.get(no_ack=True)) is not None:
            args, _, _ = message.decode()
            eta = message.headers.get("eta")
            found.append((message.headers["task"], args, None if eta is None else datetime.fromisoformat(eta)))
    return found


@pytest.mark.parametrize(
    ("broker", "horizon", "sent"),
    [
        ("redis", timedelta(minutes=55), ["in 26 minutes", "inside", "now"]),  # 3600 s visibility, 5 min margin
        ("rabbitmq", timedelta(minutes=25), ["inside", "now"]),  # 30 min consumer_timeout, 5 min margin
    ],
    indirect=["broker"],
)
def test_publish_sends_what_is_due_within_the_horizon_and_nothing_beyond_it(broker, queue, horizon, sent):
    assert dispatch.max_delay() == horizon
    now = timezone.now()
    due = {
        "now": None,
        "inside": now + horizon - timedelta(minutes=1),
        "beyond": now + horizon + timedelta(minutes=1),
        "in 26 minutes": now + timedelta(minutes=26),
    }
    published = {name: dispatch.publish(dispatch.TICK_TASK, args=[name], eta=eta) for name, eta in due.items()}
    assert sorted(name for name, ok in published.items() if ok) == sent
    assert sorted(queued(broker, queue), key=lambda message: message[1]) == [
        (dispatch.TICK_TASK, [name], due[name]) for name in sent
    ]
