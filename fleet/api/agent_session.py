"""The agent's session request and answer, without DRF: read by the fast paths (the synchronous view's plain
heartbeat and the async watch front, ``fleet/watch/front.py``) and written by every path.

``session_request`` takes only what ``AgentSessionView`` would accept (the strict parser's and
``AgentSessionInSerializer``'s checks, never looser); anything else is None and goes to DRF, which answers it,
errors included. ``session_answer`` is the one shape of a session answer (docs/fleet.md, "Node-agent protocol").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from core.fields import PG_INT_MAX
from core.parsers import loads_strict
from fleet.services.sessions import SessionReport
from fleet.services.watch import SEEN_MAX_LENGTH, WAIT_MAX_SECONDS, WAIT_MIN_SECONDS
from fleet.tokens import bearer_token

VERSION_REGEX = r"\A[A-Za-z0-9._+-]{1,64}\Z"
# Set in the ASGI scope of every session request the async front hands to Django: Django answers it at once,
# never holds it on one of its threads (the front holds what it answers itself). Not a header: no client sets it.
ANSWER_AT_ONCE_SCOPE_KEY = "rollout.answer_at_once"
_VERSION = re.compile(VERSION_REGEX)
_REQUIRED = frozenset({"daemonVersion", "protocolVersion"})
_WATCH = frozenset({"wait", "seen"})


@dataclass(frozen=True)
class SessionRequest:
    """A well-formed session request: a heartbeat or a join, held (``wait``) or not."""

    token: str
    daemon_version: str
    protocol_version: int
    wait: int | None = None
    seen: str | None = None

    @property
    def held_for(self) -> str | None:
        """The revision to hold on (None: answer at once): ``seen``, when ``wait`` is given."""
        return self.seen if self.wait is not None else None

    @property
    def likely_join(self) -> bool:
        """A watching agent's first request since it started (``wait`` without ``seen``): most likely a join."""
        return self.wait is not None and self.seen is None


def session_request(*, authorization: str | None, content_type: str, accept: str, body: bytes) -> SessionRequest | None:
    """The request, when DRF would accept it as a session request; else None (DRF answers it)."""
    token = bearer_token(authorization)
    if token is None or content_type != "application/json" or not ("*/*" in accept or "json" in accept):
        return None
    try:
        data = loads_strict(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not _REQUIRED <= data.keys() <= _REQUIRED | _WATCH:
        return None
    version, protocol = data["daemonVersion"], data["protocolVersion"]
    wait, seen = data.get("wait"), data.get("seen")
    if not isinstance(version, str) or not _VERSION.match(version):
        return None
    if not _is_int(protocol) or not 1 <= protocol <= PG_INT_MAX:
        return None
    if "wait" in data and not (_is_int(wait) and WAIT_MIN_SECONDS <= wait <= WAIT_MAX_SECONDS):
        return None
    if "seen" in data and not (isinstance(seen, str) and len(seen) <= SEEN_MAX_LENGTH and "\x00" not in seen):
        return None
    return SessionRequest(token=token, daemon_version=version, protocol_version=protocol, wait=wait, seen=seen)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def session_answer(report: SessionReport) -> dict[str, Any]:
    """Every session answer: the desired state, the pending commands, the interval, the revision, and the fields
    plug-ins add (the rollout module: ``rootVersion``, docs/signing.md#rotating-the-release-keys)."""
    return {
        "spec": report.spec,
        "commands": report.commands,
        "heartbeatSeconds": report.heartbeat_seconds,
        "specRevision": report.spec_revision,
        **report.fields,
    }


def session_answer_bytes(report: SessionReport) -> bytes:
    """``session_answer`` as DRF's JSONRenderer writes it (compact, UTF-8)."""
    return json.dumps(session_answer(report), separators=(",", ":"), ensure_ascii=False).encode()
