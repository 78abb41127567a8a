"""The root chain of release keys (docs/signing.md#rotating-the-release-keys): operators and agents."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import InvalidInput
from core.pagination import PaginatedViewMixin
from core.query import query_parameters
from fleet.interface import AgentTokenAuthentication, IsAgent, Scope
from rollout.api.release_serializers import ReleaseRootSerializer
from rollout.api.schema import DsseEnvelopeSerializer, error_responses
from rollout.api.views.common import caller_actor, caller_principal, envelope_bytes
from rollout.models import ReleaseRoot
from rollout.registry.roots import root_register, roots_after_queryset, roots_list

AFTER = OpenApiParameter(
    "after", OpenApiTypes.INT, description="The root version the agent holds: versions after it, oldest first."
)


class ReleaseRootViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """The chain, version 1 (the configured pins and threshold) first; a next root is registered with its envelope."""

    parser_classes: list = []  # the body is the envelope, read raw
    key_scopes = {"list": Scope.READ, "create": Scope.RELEASES}

    @extend_schema(
        responses={
            200: ReleaseRootSerializer(many=True),
            **error_responses("ReleaseRootList", bad_request=["invalid_input", "unknown_parameter"]),
        }
    )
    def list(self, request: Request) -> Response:
        return self.paginated_response(roots_list(), lambda page: ReleaseRootSerializer(page, many=True).data)

    @extend_schema(
        request={"application/json": DsseEnvelopeSerializer},
        responses={
            201: OpenApiResponse(ReleaseRootSerializer, description="Recorded: the newest root."),
            200: OpenApiResponse(ReleaseRootSerializer, description="The same root again: as recorded."),
            **error_responses(
                "ReleaseRootRegister",
                body=True,
                bad_request=["invalid_root", "threshold_not_met"],
                conflict=["root_version"],
                unavailable=["no_release_keys"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        registration = root_register(
            envelope=envelope_bytes(request, code="invalid_root"),
            recorded_by=caller_principal(request).user,
            actor=caller_actor(request),
        )
        code = status.HTTP_201_CREATED if registration.created else status.HTTP_200_OK
        return Response(ReleaseRootSerializer(registration.root).data, status=code)


def _after(request: Request) -> int:
    value = request.query_params.get("after", "0")
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise InvalidInput("after must be a root version: an integer >= 0.", code="invalid_input", field="after")
    return int(value)


class AgentReleaseRootsViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """``GET /api/compute/agent/release-roots?after=N``: the root envelopes after version N, oldest first.

    Agents verify each from the root they hold before they verify a release against the newest.
    """

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    @query_parameters(AFTER)
    @extend_schema(
        responses={
            200: OpenApiResponse(
                DsseEnvelopeSerializer(many=True), description="The envelopes exactly as registered, oldest first."
            ),
            **error_responses("AgentReleaseRoots", auth="agent", bad_request=["invalid_input", "unknown_parameter"]),
        },
    )
    def list(self, request: Request) -> Response:
        def represent(page: list[ReleaseRoot]) -> list[Any]:
            return [json.loads(root.envelope or "null") for root in page]

        return self.paginated_response(roots_after_queryset(version=_after(request)), represent)
