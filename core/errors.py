"""Domain errors: raised by services, mapped to HTTP by core.exceptions.exception_handler.

A service never returns an HTTP status; it raises one of these with a stable
snake_case ``code``. Views, admin actions, tasks and commands share them.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal with a stable code. ``status`` is the HTTP status the API uses."""

    status: int = 400
    code: str = "invalid_input"

    def __init__(self, detail: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.extra = extra

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "detail": self.detail, **self.extra}


class InvalidInput(DomainError):
    status = 400
    code = "invalid_input"


class Forbidden(DomainError):
    """The caller may not do this, whatever the object's state (HTTP 403)."""

    status = 403
    code = "permission_denied"


class NotFound(DomainError):
    status = 404
    code = "not_found"


class Conflict(DomainError):
    """The request conflicts with the current state (HTTP 409)."""

    status = 409
    code = "conflict"


class InvalidState(Conflict):
    """An illegal state-machine transition."""

    code = "invalid_state"


class Unavailable(DomainError):
    """The module is not configured for this operation (HTTP 503)."""

    status = 503
    code = "unavailable"
