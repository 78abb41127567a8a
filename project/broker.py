"""The broker connection of the Celery app: what keeps a worker running through a broker outage.

Celery builds every broker connection (the worker's consumer, events, beat, publishing) from
``app.amqp.Connection``; ``project/celery.py`` gives the app :class:`BrokerAMQP`, whose connection
class carries two fixes to the pinned celery 5.7.0 / kombu 5.7.0. Why, measured and tested:
docs/operations.md#broker-loss (tests/test_broker_connection.py, tests/faults/test_broker_outage.py).

1. **Redis: a worker that loses the broker exits** with ``Unrecoverable error:
   AttributeError("'NoneType' object has no attribute 'hostname'")``. When the consumer loses
   its connection, celery 5.7 ``collect()``\\ s it and then ``close()``\\ s it. ``collect()`` closes
   the task channel, but kombu's Redis ``Channel.close`` first reads the reply of the BRPOP in
   flight: the connection is gone, that read raises, and the close stops there (swallowed as a
   connection error), before the channel is marked closed. ``collect()`` then detaches the
   transport from its connection (``transport.client = None``) but keeps the channel as the
   connection's default channel, so ``close()`` closes it a second time: the channel now gets
   past the BRPOP, restores its unacknowledged messages (``acks_late`` and ETA tasks are held
   unacknowledged) through a new Redis pool, whose address it reads from the detached
   transport: ``None.hostname``. An ``AttributeError`` is not a connection error, so it ends the
   worker. Celery 5.6 did not call ``close()`` after ``collect()``; kombu's channel has read the
   BRPOP reply that way for years. :class:`RedisChannel` finishes the close when that reply is
   lost with its connection, so the first close completes (the restore it attempts fails as a
   connection error while the broker is down, and the messages wait in Redis's unacked hash for
   the visibility timeout, as after a worker crash) and the second is a no-op. Gossip, mingle and
   the event heartbeat only add channels to close; without them the worker exits the same way.
   Gossip's channel hits the same wall: its close deletes its auto-delete events queue, which fails
   with the broker gone, and the step's error handler then trips on the connection celery 5.7 has
   already set to ``None`` (logged as ``Error on restarting Gossip: AttributeError``); a close with
   the broker gone skips that delete.
2. **Reconnecting**: the consumer retries the broker every 2, 4, 6, ... up to 30 s (kombu's
   defaults, which Celery offers no setting for), so a worker could idle for up to 30 s after
   the broker is back. :meth:`BrokerConnection.ensure_connection` retries every
   :data:`RECONNECT_INTERVAL_MAX` (1) second: an attempt on a broker that is down is a refused connection
   (or one that times out after ``CELERY_BROKER_CONNECTION_TIMEOUT``), and a worker resumes within about
   a second of the broker's return, which the controller's recovery in seconds needs
   (docs/operations.md#broker-loss).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kombu
import kombu.transport.redis
from celery.app.amqp import AMQP
from kombu.transport.virtual import Empty

# Seconds between two attempts to reach a broker that is down: a worker resumes within this (plus its
# start-up) of the broker's return.
RECONNECT_INTERVAL_MAX = 1


class RedisChannel(kombu.transport.redis.Channel):
    """kombu's Redis channel, whose close completes when the broker is gone (fix 1)."""

    def close(self) -> None:
        channel: Any = self  # kombu's type stubs leave out the Redis channel's internals
        if channel._in_poll:
            try:
                channel._brpop_read()  # clears _in_poll whatever happens
            except Empty:
                pass
            except channel.connection_errors:
                pass  # the reply, if there was one, went with the connection (as it would without this class)
        super().close()

    def queue_delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        channel: Any = self
        try:
            super().queue_delete(queue, *args, **kwargs)
        except channel.connection_errors:
            if not channel._closing:
                raise
            # Closing removes the channel's auto-delete (fanout) queues: with the broker gone, the close goes on.
            # The queues expire on their own (events queues: Celery's event_queue_expires).


class RedisTransport(kombu.transport.redis.Transport):
    Channel = RedisChannel


class BrokerConnection(kombu.Connection):
    """The app's broker connection: the fixed Redis transport, and a bounded reconnect interval (fix 2)."""

    def get_transport_cls(self) -> Any:
        transport = super().get_transport_cls()
        # Exactly kombu's Redis transport (redis:// and rediss://); other transports are used as they are.
        return RedisTransport if transport is kombu.transport.redis.Transport else transport

    def ensure_connection(  # type: ignore[override]  # kombu's stubs type max_retries int; its code takes None
        self,
        errback: Callable[[Exception, float], None] | None = None,
        max_retries: int | None = None,
        interval_start: int = 1,
        interval_step: int = 1,
        interval_max: int = RECONNECT_INTERVAL_MAX,
        **kwargs: Any,
    ) -> BrokerConnection:
        """kombu's, with shorter default intervals (the worker's consumer passes none)."""
        retries: Any = max_retries
        super().ensure_connection(errback, retries, interval_start, interval_step, interval_max, **kwargs)
        return self


class BrokerAMQP(AMQP):
    """Celery's AMQP helper with :class:`BrokerConnection`: ``Celery(amqp="project.broker:BrokerAMQP")``."""

    Connection = BrokerConnection
