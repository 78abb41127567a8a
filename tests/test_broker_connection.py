"""The app's broker connection (project/broker.py) on a private redis-server that is killed under it.

The steps are those of celery 5.7's consumer when it loses the broker: ``collect()`` then ``close()`` of a
connection whose task channel holds unacknowledged messages and has a BRPOP in flight (the worker's event
loop always has one). The whole worker is proven by tests/faults/test_broker_outage.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import kombu
import kombu.utils.functional
import pytest
from kombu import Consumer, Exchange, Producer, Queue

from project import celery_app
from project.broker import RECONNECT_INTERVAL_MAX, BrokerConnection, RedisChannel
from tests.brokers import PrivateRedis


@pytest.fixture
def redis_server(tmp_path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def consume_events(connection: kombu.Connection) -> kombu.Channel:
    """A second channel consuming an auto-delete fanout queue, as the worker's remote control and gossip do."""
    channel = connection.channel()
    events = Queue("events.h", Exchange("events", type="fanout"), auto_delete=True)
    Consumer(channel, queues=[events], callbacks=[lambda body, message: None]).consume()
    return channel


def held_messages_then_broker_lost(connection: kombu.Connection, server: PrivateRedis) -> kombu.Connection:
    """Two messages delivered and not acked (as acks_late and ETA tasks are), a BRPOP in flight, an events
    channel beside it, Redis killed."""
    queue = Queue("held", Exchange("held", type="direct"), routing_key="held")
    channel = connection.default_channel
    producer = Producer(channel)
    for n in range(2):
        producer.publish({"n": n}, exchange=queue.exchange, routing_key="held", declare=[queue])
    received: list[kombu.Message] = []
    consumer = Consumer(channel, queues=[queue], callbacks=[lambda body, message: received.append(message)])
    consumer.qos(prefetch_count=10)  # room for more: the channel goes on polling
    consumer.consume()
    while len(received) < 2:
        connection.drain_events(timeout=5)
    with pytest.raises(socket.timeout):
        connection.drain_events(timeout=0.05)  # the next BRPOP is sent and waits, as in the worker's loop
    assert channel._in_poll
    assert len(channel.qos._delivered) == 2
    consume_events(connection)
    server.stop()
    return connection


def test_a_lost_redis_connection_with_held_messages_closes_cleanly(redis_server):
    connection = held_messages_then_broker_lost(celery_app.connection_for_read(url=redis_server.url), redis_server)
    assert isinstance(connection, BrokerConnection)
    channel = connection.default_channel
    assert isinstance(channel, RedisChannel)
    # What celery 5.7's Consumer.on_connection_error_after_connected does; neither may raise.
    connection.collect(socket_timeout=5)
    connection.close()
    assert channel.closed


def test_kombus_own_connection_still_fails_there(redis_server):
    """Why project/broker.py exists: without it the same steps raise the AttributeError that ended the worker.
    When an upgrade of kombu or celery makes this test fail, the fix may be dropped (docs/operations.md#broker-loss)."""
    url = redis_server.url
    connection = held_messages_then_broker_lost(
        kombu.Connection(url, transport_options={"socket_timeout": 5}), redis_server
    )
    connection.collect(socket_timeout=5)
    with pytest.raises(AttributeError, match="hostname"):
        connection.close()


def test_a_channel_closed_with_the_broker_gone_skips_deleting_its_auto_delete_queue(redis_server):
    """Gossip's events queue: its close must not raise (celery 5.7 logs an AttributeError for it otherwise)."""
    connection = celery_app.connection_for_read(url=redis_server.url)
    channel = consume_events(connection)
    redis_server.stop()
    channel.close()
    assert channel.closed
    connection.collect(socket_timeout=1)


def test_reconnecting_retries_within_seconds_however_long_the_broker_is_down(monkeypatch, redis_server):
    """kombu's default waits 2, 4, 6, ... 30 s between attempts; the app's connection 1 s, always (the sleeps are
    recorded instead of slept: the attempts themselves are real connections refused)."""
    redis_server.stop()
    slept: list[float] = []
    monkeypatch.setattr(kombu.utils.functional, "sleep", slept.append)
    connection = celery_app.connection_for_read(url=redis_server.url)
    intervals: list[float] = []
    with pytest.raises((*connection.recoverable_connection_errors, kombu.exceptions.OperationalError)):
        connection.ensure_connection(lambda exc, interval: intervals.append(interval), max_retries=8)
    assert intervals == [1] * 8
    assert max(intervals) == RECONNECT_INTERVAL_MAX
