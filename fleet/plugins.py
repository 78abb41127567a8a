"""The hooks a plug-in app (such as ``rollout``) registers with the host fleet (re-exported by fleet.interface).

Plug-ins never reach into fleet internals; they use what is here:

- ``node_session_reported``: a Django signal sent (after the transaction
  commits) when an agent joins, or reports a daemonVersion different from its
  session's. Arguments: ``node_id``, ``daemon_version``, ``protocol_version``,
  ``previous_version`` (None on a first join). Plain heartbeats send nothing,
  so the hot path stays a constant handful of queries.
- ``register_disruption_source(fn)``: ``fn(pool_id)`` returns a queryset of
  node ids that the plug-in is disrupting in that pool (for rollout: nodes
  with an upgrade in flight). The disruption budget counts them with active
  workflows.
- ``register_daemon_resolver(fn)``: ``fn(version, arch)`` returns the daemon
  section {"version", "url", "sha256", ...} for a version, or None. Used to give a
  node created in a pool with a default daemon version its desired daemon.
- ``node_daemon_refused``: a Django signal sent synchronously, before the session
  answer is built, when an agent reports on its session call that it refused
  the daemon its spec named (``"refused": {"version", "code", "detail"}``).
  Arguments: ``node_id``, ``version``, ``code``, ``detail`` and ``at`` (the
  session call's time, which is also the node's ``last_seen_at``). A receiver
  that changes the node's spec (sends it back) has the change in that very
  answer. A receiver that fails makes the call answer 503: the agent reports
  the refusal again with its next call.
- ``register_refusal_codes(codes)``: the ``refused.code`` values the agent API
  accepts (none until a plug-in registers some: the host knows no release trust).
- ``register_session_fields(fn)``: ``fn()`` returns top-level fields added to
  every session answer (the plain-heartbeat fast path included), such as
  ``{"rootVersion": 3}``. Called on every heartbeat: it must not query the
  database each time (cache, with a bound on staleness it documents).
- ``register_node_links(fn)``: ``fn(node_id)`` returns ``(text, url)`` links the node's admin page
  shows (for rollout: the node's current rollout and its upgrade history). The host never imports
  the plug-in's admin; a link is all it knows of it.
- ``register_admin_notices(fn)``: ``fn(request)`` adds what the admin's front page must say to the
  request's messages (``django.contrib.messages``), such as rollout's "no controller is running" banner.
  Called on every ``GET`` of the admin's index (fleet/admin_site.py).
- ``register_quick_answers(fn)``: ``fn(method, path, headers)`` returns a ``QuickAnswer`` that the
  web tier's async front (fleet/watch/front.py) sends for a ``GET`` or ``HEAD`` without a body,
  without Django's request machinery, or None to leave the request to Django. ``headers`` has the
  request's header names in lower case. It runs on the event loop, for every such request: it must
  answer from what the process already holds (no statement, no blocking I/O but a local stat), and
  say None at once to a path it does not know. The front adds Content-Length and what Django's
  middleware would (X-Frame-Options and the other security headers) and answers only a Host Django would take. It
  counts no request limit (fleet/api/limits.py): a plug-in answers only paths the limits exempt. For
  rollout: a download of a binary this process has served before, handed to nginx.
- ``register_join_step(step)``: a ``JoinStep``, SQL that runs in the join's own statement (the same
  transaction and round trip as the session it records), and the Python it hands its result to once that
  committed, in place of a ``node_session_reported`` receiver that would run a statement of its own. For
  rollout: an in-flight node that rejoins on its target succeeds (docs/controller.md#reacting-at-once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from django.dispatch import Signal

node_session_reported = Signal()
node_daemon_refused = Signal()

DisruptionSource = Callable[[UUID], QuerySet]
DaemonResolver = Callable[[str, str], dict | None]
SessionFields = Callable[[], dict[str, Any]]
NodeLinks = Callable[[UUID], list[tuple[str, str]]]
AdminNotices = Callable[[Any], None]  # fn(request)


@dataclass(frozen=True)
class QuickAnswer:
    """A plug-in's answer that the async front sends as it is (``register_quick_answers``)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""


QuickAnswers = Callable[[str, str, Mapping[str, str]], QuickAnswer | None]


@dataclass(frozen=True, eq=False)
class JoinStep:
    """A plug-in's part of the join's statement (fleet/services/session_statements.py ``join_sql``).

    Its SQL runs on every join or version change that statement records, in its transaction, and may read the
    CTE ``joined_node`` (one column, ``node_id``: the node when the statement recorded a join, no row otherwise)
    and the statement's ``%(version)s`` (the reported daemon version) and ``%(now)s``. What it fails makes the
    join fail (the agent retries it), so it must not wait long on a lock the host's writers could hold."""

    #: CTE definitions (``name AS (...), ...``) appended to the statement's ``WITH``; their names, and those of
    #: its ``params``, begin with the plug-in's label (a parameter named as one of the host's gets the host's value).
    ctes: str
    #: The columns it adds to the statement's one row: name -> SQL expression (a scalar subquery over its CTEs).
    #: Their names begin with the plug-in's label, and are ``record``'s fields.
    columns: Mapping[str, str]
    #: A ``NamedTuple`` class whose fields are the columns' names: the row is read into it by name
    #: (core.statements.NamedRows); a column the statement has and the record not, or the reverse, fails the join.
    record: type[Any]
    params: Mapping[str, Any]
    #: ``committed(node_id=, daemon_version=, row=)``, once the join committed: ``row`` is a ``record``.
    #: What it raises is logged: the join is committed.
    committed: Callable[..., None]


_disruption_sources: list[DisruptionSource] = []
_daemon_resolvers: list[DaemonResolver] = []
_refusal_codes: set[str] = set()
_session_fields: list[SessionFields] = []
_node_links: list[NodeLinks] = []
_quick_answers: list[QuickAnswers] = []
_admin_notices: list[AdminNotices] = []
_join_steps: list[JoinStep] = []


def register_disruption_source(source: DisruptionSource) -> None:
    if source not in _disruption_sources:
        _disruption_sources.append(source)


def disruption_sources() -> tuple[DisruptionSource, ...]:
    return tuple(_disruption_sources)


def register_daemon_resolver(resolver: DaemonResolver) -> None:
    if resolver not in _daemon_resolvers:
        _daemon_resolvers.append(resolver)


def resolve_daemon_section(version: str, arch: str) -> dict | None:
    for resolver in _daemon_resolvers:
        section = resolver(version, arch)
        if section is not None:
            return section
    return None


def register_refusal_codes(codes: Iterable[str]) -> None:
    _refusal_codes.update(codes)


def refusal_codes() -> frozenset[str]:
    return frozenset(_refusal_codes)


def register_session_fields(fields: SessionFields) -> None:
    if fields not in _session_fields:
        _session_fields.append(fields)


def session_fields() -> dict[str, Any]:
    """The plug-ins' fields of a session answer (see ``register_session_fields``)."""
    merged: dict[str, Any] = {}
    for fields in _session_fields:
        merged.update(fields())
    return merged


def register_node_links(links: NodeLinks) -> None:
    if links not in _node_links:
        _node_links.append(links)


def node_links(node_id: UUID) -> list[tuple[str, str]]:
    """The plug-ins' links of a node's admin page (see ``register_node_links``), in registration order."""
    return [link for links in _node_links for link in links(node_id)]


def register_admin_notices(notices: AdminNotices) -> None:
    if notices not in _admin_notices:
        _admin_notices.append(notices)


def admin_notices(request: Any) -> None:
    """The plug-ins' notices on the admin's front page (see ``register_admin_notices``), in registration order."""
    for notices in _admin_notices:
        notices(request)


def register_quick_answers(answers: QuickAnswers) -> None:
    if answers not in _quick_answers:
        _quick_answers.append(answers)


def quick_answer(method: str, path: str, headers: Mapping[str, str]) -> QuickAnswer | None:
    """The first plug-in's answer to a request (see ``register_quick_answers``); None: Django answers it."""
    for answers in _quick_answers:
        answer = answers(method, path, headers)
        if answer is not None:
            return answer
    return None


def register_join_step(step: JoinStep) -> None:
    if step not in _join_steps:
        _join_steps.append(step)


def join_steps() -> tuple[JoinStep, ...]:
    """The plug-ins' join steps (see ``register_join_step``), in registration order."""
    return tuple(_join_steps)
