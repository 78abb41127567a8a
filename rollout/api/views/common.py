"""What every view of the module shares: the caller, as a Principal and as an audit Actor."""

from __future__ import annotations

from typing import Any, cast

from django.core.exceptions import RequestDataTooBig
from django.utils import timezone
from rest_framework.request import Request

from core.errors import InvalidInput
from fleet.interface import Actor, Principal
from rollout.api.serializers import (
    NodeUpgradeSerializer,
)
from rollout.models import NodeUpgrade
from rollout.release.dsse import MAX_ENVELOPE_BYTES
from rollout.rollouts.blockers import node_blockers


def caller_principal(request: Request) -> Principal:
    # Every view here runs behind ApiKeyAuthentication and FleetAdmin: ``request.auth`` is the caller's
    # Principal and ``request.user`` its user.
    return cast(Principal, request.auth)


def envelope_bytes(request: Request, *, code: str = "invalid_envelope") -> bytes:
    """The raw request body, refused (``code``) before reading when it is larger than an envelope may be."""
    too_big = InvalidInput(f"The envelope is larger than {MAX_ENVELOPE_BYTES} bytes.", code=code)
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_ENVELOPE_BYTES:
        raise too_big
    try:
        return request.body
    except RequestDataTooBig as exc:
        raise too_big from exc


def represent_upgrades(page: list[NodeUpgrade]) -> list[dict[str, Any]]:
    """Node rows with their blockers, computed for the page at once (a constant number of queries)."""
    blockers = node_blockers(page, now=timezone.now())
    return cast(list[dict[str, Any]], NodeUpgradeSerializer(page, many=True, context={"blockers": blockers}).data)


def caller_actor(request: Request) -> Actor:
    return Actor.api(request.user, caller_principal(request).api_key)


def dry_run(request: Request) -> bool:
    """``?dryRun=``: true (also 1, yes) or false (also 0, no); anything else is a 400, never a real create."""
    value = request.query_params.get("dryRun")
    if value is None:
        return False
    if value.lower() in {"1", "true", "yes"}:
        return True
    if value.lower() in {"0", "false", "no"}:
        return False
    raise InvalidInput("dryRun must be true or false.", code="invalid_input", field="dryRun")
