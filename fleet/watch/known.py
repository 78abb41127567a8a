"""What a web process last read for each agent it holds, answered from memory while nothing says it changed.

A watching agent comes back as soon as its held answer arrives, with the same ``seen``, about once a ``wait``.
Its arrival's statement (``agent_heartbeat``) would read what the process read last time, and would write
nothing: its ``last_seen_at`` write is coalesced, and the keeper touched the node while it was held. That
statement was most of the web tier's and PostgreSQL's work for an idle fleet (docs/benchmarks.md), so the
process remembers, per token, the report its last statement read, and holds the next arrival on it without a
statement when all of these hold (docs/architecture.md#watch, "Arrivals held from memory", says why each is enough):

- the request repeats what was read: the same daemon and protocol version, and ``seen`` is the report's revision;
- nothing was notified for the node since the read began: the watch channel carries every change to the node's
  spec and pending commands, and (fleet/migrations/0007_watch_notify_sessions.py) to its session, its token and
  its existence; a notification drops the entry, and so does the loss of the subscription (everything). A change
  to the session is told only to the process the session records as its watcher (0011): a read is kept only when
  it names this process (``SessionReport.watched_by``, ``WatchHub.remember``);
- the read is younger than its lifetime, drawn between half ``KNOWN_SECONDS`` and all of it: whatever a
  notification could miss, a read repairs it;
- the node's ``last_seen_at`` is known to be less than one interval old (``seen_floor``, from the keeper's
  touches), so the statement would not have written it: the database ends as the statement would have left it.

Anything else reads the database, as before. A join's read is remembered too (the arrival after a join is every
upgraded agent's): the join's own notifications (its session opened, its upgrade commands done) name its
transaction, which the read names too (``SessionReport.written_by``), and do not drop it; any other transaction's do.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleet.services.sessions import SessionReport

#: A read older than this is not answered from: the next arrival reads the database (bounds what a missed
#: notification could cost, whatever its cause). Each read's lifetime is drawn between half of it and all of it:
#: reads made together, as a reconnect storm's are, would otherwise age out together, and their agents would read
#: the database again at the storm's rate (docs/architecture.md#watch).
KNOWN_SECONDS = 300.0


def known_lifetime() -> float:
    """A read's lifetime: uniform between half ``KNOWN_SECONDS`` and all of it (spread, not secret)."""
    return KNOWN_SECONDS * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret


@dataclass
class Known:
    """A heartbeat's or a join's report, and what it was read for."""

    #: The node as the watch channel names it (fleet/watch/hub.py ``NodeKey``).
    node_id: str
    report: SessionReport
    daemon_version: str
    protocol_version: int
    #: The event loop's time just before the read began: a notification at or after it may postdate the read.
    since: float
    #: The wall clock (seconds since the epoch) that the node's stored ``last_seen_at`` is known to be at or after.
    seen_floor: float
    #: The event loop's time from which the read is no longer answered from: ``since`` and a drawn lifetime.
    until: float = field(init=False)

    def __post_init__(self) -> None:
        self.until = self.since + known_lifetime()


class KnownSessions:
    """Per agent token hash, this process's last heartbeat or join read. Used from the event loop only."""

    def __init__(self) -> None:
        self._by_token: dict[str, Known] = {}
        self._token_of: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_token)

    def remember(self, token_hash: str, known: Known) -> None:
        previous = self._by_token.get(token_hash)
        if previous is not None and previous.node_id == known.node_id:
            known.seen_floor = max(known.seen_floor, previous.seen_floor)
        stale_token = self._token_of.get(known.node_id)
        if stale_token is not None and stale_token != token_hash:
            self._by_token.pop(stale_token, None)
        if previous is not None and previous.node_id != known.node_id:
            self._token_of.pop(previous.node_id, None)
        self._by_token[token_hash] = known
        self._token_of[known.node_id] = token_hash

    def get(self, token_hash: str) -> Known | None:
        return self._by_token.get(token_hash)

    def forget_node(self, node_id: str, *, unless_written_by: str | None = None) -> None:
        """Drop the node's read, unless it was a join's and the transaction ``unless_written_by`` is that join's (its
        own notification says what the read already holds)."""
        token_hash = self._token_of.get(node_id)
        if token_hash is None:
            return
        written_by = self._by_token[token_hash].report.written_by
        if unless_written_by is not None and written_by == unless_written_by:
            return
        del self._token_of[node_id]
        del self._by_token[token_hash]

    def forget_all(self) -> None:
        self._by_token.clear()
        self._token_of.clear()

    def touched(self, node_ids: Iterable[str], *, seen_floor: float) -> None:
        """The keeper touched these nodes: each one's ``last_seen_at`` is now at or after ``seen_floor``."""
        for node_id in node_ids:
            token_hash = self._token_of.get(node_id)
            if token_hash is not None:
                known = self._by_token[token_hash]
                known.seen_floor = max(known.seen_floor, seen_floor)

    def forget_expired(self, now: float) -> None:
        """Drop the reads whose lifetime ended by ``now`` (the loop's clock): they would not be answered from."""
        expired = [(token_hash, known.node_id) for token_hash, known in self._by_token.items() if known.until <= now]
        for token_hash, node_id in expired:  # a list of the expired only, not a copy of every read
            del self._by_token[token_hash]
            self._token_of.pop(node_id, None)
