"""``specRevision``: what a session answer tells the agent to do, as one opaque string (docs/fleet.md#watch).

A digest of the node's spec and pending commands in canonical JSON (keys sorted, compact). It is computed
from what the answer carries, not kept beside it: it changes when, and only when, the spec or the pending
commands change, whichever code path (or raw SQL) changed them, and two paths that read the same rows (the
one-statement heartbeat, the join path) give the same revision.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any


def spec_revision(*, spec: Any, commands: list[dict[str, Any]]) -> str:
    """22 URL-safe characters (128 bits of SHA-256) naming this spec and these pending commands."""
    canonical = json.dumps([spec, commands], sort_keys=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()[:16]).decode().rstrip("=")
