"""The API's error bodies in the OpenAPI 3 description (drf-spectacular), shared by every app.

- ``register_codes(...)``: each app registers the error codes it answers with and
  what they mean (fleet/api/schema.py, rollout/api/schema.py); the schema lists
  exactly those.
- ``error_responses(...)`` builds the ``responses`` entries of one operation's
  refusals, per status, each an error component whose ``code`` is an enum of
  exactly the codes that status can carry there, so a client (and
  schemathesis, tests/api/test_schemathesis.py) can rely on the list. Views
  use it in their ``@extend_schema(responses=...)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import serializers

#: Every code the API answers with, and what it means (the enum descriptions in the schema).
CODES: dict[str, str] = {
    # generic (core/exceptions.py)
    "invalid_input": "The body or a query parameter failed validation (see `errors` or `field`).",
    "unknown_parameter": "A query parameter this endpoint does not take (`field` names it; the endpoint's "
    "parameters are listed in its description).",
    "invalid_json": "The body is not valid UTF-8 JSON, nests deeper than 64 levels, or holds a lone surrogate.",
    "not_authenticated": "No `Authorization: Bearer` header.",
    "authentication_failed": "The bearer token is malformed, unknown or revoked.",
    "key_expired": "The API key's `expiresAt` has passed: make a new key.",
    "insufficient_scope": "The API key's `scopes` do not include the one this method requires (`required`).",
    "permission_denied": "The API key has no `compute:fleet:admin` grant on its tenant's fleet scope (approving "
    "and denying a rollout: no `compute:rollout:approve`).",
    "not_found": "No such object in the caller's tenant (another tenant's objects are not found either).",
    "unsupported_media_type": "The body is not `application/json`.",
    "too_large": "The body is larger than 1 MiB (refused before it is read).",
    "invalid_state": "The object is not in a state that allows this action (`state` says which it is in).",
    "database_unavailable": "The database is down or restarting (503, with `Retry-After`): retry shortly.",
    "throttled": "The credential is over its request limit (429): retry after `retryAfter` seconds "
    "(also the `Retry-After` header).",
}

AnyField: TypeAlias = "serializers.Field[Any, Any, Any, Any]"
AnySerializer: TypeAlias = "serializers.Serializer[Any]"

#: Fields some codes add to the body, beside ``code`` and ``detail`` (registered with the codes).
_EXTRA_FIELDS: dict[str, dict[str, AnyField]] = {
    "invalid_input": {
        "field": serializers.CharField(required=False, help_text="The request field at fault."),
        "errors": serializers.DictField(
            required=False, help_text="Per-field messages, as DRF's validation reports them."
        ),
    },
    "unknown_parameter": {
        "field": serializers.CharField(required=False, help_text="The query parameter refused (always given).")
    },
    "invalid_state": {"state": serializers.CharField(required=False, help_text="The object's current state.")},
    "throttled": {"retryAfter": serializers.IntegerField(help_text="Seconds to wait, as in `Retry-After`.")},
    "insufficient_scope": {
        "required": serializers.CharField(required=False, help_text="The scope this method requires.")
    },
}


def register_codes(codes: Mapping[str, str], extra_fields: Mapping[str, dict[str, AnyField]] | None = None) -> None:
    """Add an app's error codes (and the extra body fields some carry) to the catalog.

    A code two apps answer with keeps its first meaning: the catalog is one enum per code.
    """
    for code, meaning in codes.items():
        CODES.setdefault(code, meaning)
    for code, fields in (extra_fields or {}).items():
        _EXTRA_FIELDS.setdefault(code, fields)


AUTH_CODES = ("not_authenticated", "authentication_failed")
#: An API key may also have expired; outside its scopes it is refused 403 insufficient_scope.
KEY_AUTH_CODES = (*AUTH_CODES, "key_expired")
KEY_FORBIDDEN_CODES = ("permission_denied", "insufficient_scope")


def _extra_fields(code: str) -> dict[str, AnyField]:
    return dict(_EXTRA_FIELDS.get(code, {}))


_error_classes: dict[frozenset[str], type[AnySerializer]] = {}

#: Names of the code sets several operations share.
_SHARED_NAMES = {frozenset({"invalid_input", "invalid_json"}): "InvalidBodyError"}


def _camel(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


def error_serializer(name: str, codes: Iterable[str]) -> type[AnySerializer]:
    """The error body component whose ``code`` is one of ``codes``.

    One component per set of codes, so each enum belongs to one component
    (drf-spectacular then names it ``<component>CodeEnum`` without a
    collision). A set of one code is named after it (``InvalidStateError``);
    a larger set takes ``name``, given by the first operation that uses it.
    """
    codes = tuple(dict.fromkeys(codes))
    unknown = [code for code in codes if code not in CODES]
    if unknown:
        raise ValueError(f"undocumented error code(s) {unknown}: register them with core.openapi.register_codes")
    key = frozenset(codes)
    if key in _error_classes:
        return _error_classes[key]
    if len(codes) == 1:
        name = f"{_camel(codes[0])}Error"
    name = _SHARED_NAMES.get(key, name)
    attrs: dict[str, Any] = {
        "code": serializers.ChoiceField(choices=[(code, CODES[code]) for code in codes]),
        "detail": serializers.CharField(help_text="A human sentence."),
        "__doc__": "An error body: " + ", ".join(f"`{code}`" for code in codes) + ".",
        "__module__": __name__,
    }
    for code in codes:
        attrs.update(_extra_fields(code))
    cls = type(f"{name}Serializer", (serializers.Serializer,), attrs)
    _error_classes[key] = cls
    return cls


def _response(status: int, name: str, codes: Sequence[str]) -> OpenApiResponse:
    description = "; ".join(f"`{code}`: {CODES[code]}" for code in codes)
    example_code = codes[0]
    return OpenApiResponse(
        response=error_serializer(name, codes),
        description=description,
        examples=[
            OpenApiExample(
                f"{status} {example_code}",
                value={"code": example_code, "detail": CODES[example_code].replace("`", "")},
                status_codes=[str(status)],
                response_only=True,
            )
        ],
    )


def error_responses(
    name: str,
    *,
    auth: str | None = "key",
    json_body: bool = False,
    body: bool | None = None,
    bad_request: Sequence[str] = (),
    forbidden: Sequence[str] = (),
    not_found: Sequence[str] = (),
    conflict: Sequence[str] = (),
    unavailable: Sequence[str] = (),
) -> dict[int, OpenApiResponse]:
    """The error ``responses`` of one operation, keyed by status.

    ``auth``: ``"key"`` (an API key with the fleet-admin grant: 401, 403),
    ``"agent"`` (an agent token: 401) or None; a credential may be over its limit (429).
    ``json_body``: the view parses a JSON body (400 ``invalid_json``, 415).
    ``body``: the view reads a body (413 ``too_large``; defaults to ``json_body``).
    ``forbidden``: 403 codes beside ``permission_denied`` (a rule about the caller, e.g. ``self_approval``).
    ``name`` prefixes the names of the components of sets of several codes (see ``error_serializer``).
    """
    responses: dict[int, OpenApiResponse] = {}
    bad = list(bad_request) + (["invalid_json"] if json_body else [])
    if bad:
        responses[400] = _response(400, f"{name}BadRequest", bad)
    if auth == "key":
        responses[401] = _response(401, "KeyUnauthenticated", KEY_AUTH_CODES)
    elif auth is not None:
        responses[401] = _response(401, "UnauthenticatedError", AUTH_CODES)
    if auth == "key" and forbidden:
        responses[403] = _response(403, f"{name}Forbidden", (*KEY_FORBIDDEN_CODES, *forbidden))
    elif auth == "key":
        responses[403] = _response(403, "PermissionDenied", KEY_FORBIDDEN_CODES)
    if not_found:
        responses[404] = _response(404, f"{name}NotFound", not_found)
    if conflict:
        responses[409] = _response(409, f"{name}Conflict", conflict)
    if json_body if body is None else body:
        responses[413] = _response(413, "TooLarge", ("too_large",))
    if json_body:
        responses[415] = _response(415, "UnsupportedMediaType", ("unsupported_media_type",))
    if auth is not None:
        responses[429] = _response(429, "Throttled", ("throttled",))
    if unavailable:
        responses[503] = _response(503, f"{name}Unavailable", unavailable)
    return responses
