"""Bearer secrets: generated with ``secrets``, stored as SHA-256 only.

They carry 256 bits of entropy, so a fast hash is the right tool (as for
GitHub tokens); a slow password hash would only slow every request.
"""

from __future__ import annotations

import hashlib
import secrets


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def bearer_token(authorization_header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization_header:
        return None
    scheme, _, token = authorization_header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
