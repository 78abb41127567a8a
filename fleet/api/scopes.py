"""Which scope each API method requires (docs/api.md#scopes): declared on the view, checked with the key.

A view that API keys call declares ``key_scopes``: its viewset actions (``list``, ``create``,
``pause``...) or, for a plain APIView, its lowercase HTTP methods (``get``), each mapped to exactly
one Scope, or to ``ANY_SCOPE`` (making and revoking the caller's own keys: any key may, and a key it makes
is never wider than itself, so no scope is needed to narrow). Every GET is ``read``. HEAD is its GET; OPTIONS
(DRF's metadata) is ``read``.
tests/iam/test_scopes.py walks the URL conf: no method a key may call is left without its scope.
"""

from __future__ import annotations

from rest_framework.request import Request

from core.errors import Forbidden
from fleet.models import Scope
from fleet.services.iam import Principal

_READ_ALWAYS = frozenset({"metadata", "options"})
#: Declared for a method every key may call whatever its scopes (the caller's own keys, docs/api.md#scopes).
ANY_SCOPE = "any"


def method_name(view: object, request: Request) -> str | None:
    """What ``key_scopes`` is keyed by for this request: the viewset's action, else the HTTP method."""
    if hasattr(view, "action_map"):  # a viewset: None when the method maps to no action (a 405 follows)
        return getattr(view, "action", None)
    method = request.method.lower() if request.method else ""
    return "get" if method == "head" else method


def required_scope(view: object, request: Request) -> Scope | str | None:
    """The scope the request needs; None when the view declares none for it (or no handler exists: 405)."""
    name = method_name(view, request)
    if name is None:
        return None
    if name in _READ_ALWAYS:
        return Scope.READ
    return dict(getattr(view, "key_scopes", {})).get(name)


def handler_exists(view: object, request: Request) -> bool:
    """Whether a handler will answer (else DRF answers 405 after the permission checks)."""
    if hasattr(view, "action_map"):
        return getattr(view, "action", None) is not None
    return hasattr(view, (request.method or "").lower())


def scope_check(principal: Principal, view: object, request: Request) -> None:
    """403 ``insufficient_scope`` naming the scope required when the key lacks it (no query: read with the key)."""
    scope = required_scope(view, request)
    if scope is None:
        if not handler_exists(view, request):
            return
        # Fail closed: an undeclared method is refused (and tests/iam/test_scopes.py fails).
        raise Forbidden(f"{type(view).__name__} declares no scope for this method.", code="permission_denied")
    if scope != ANY_SCOPE and scope not in principal.scopes:
        raise Forbidden(
            f"This API key does not have the {str(scope)!r} scope this method requires.",
            code="insufficient_scope",
            required=str(scope),
        )
