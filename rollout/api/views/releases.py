"""Releases: register, list, block (docs/api.md#releases). The downloads are views/downloads.py."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.pagination import PaginatedViewMixin
from core.parsers import StrictJSONParser
from rollout.api.release_serializers import (
    ReleaseBlockSerializer,
    ReleaseSerializer,
)
from rollout.api.schema import (
    ENVELOPE_EXAMPLE,
    DsseEnvelopeSerializer,
    error_responses,
)
from rollout.api.views.common import caller_actor, caller_principal, envelope_bytes
from rollout.models import Release
from rollout.registry.releases import release_list, release_register
from rollout.rollouts.blocks import blocks_for, release_block, release_unblock

RELEASE_VERSION = OpenApiParameter("version", str, OpenApiParameter.PATH, description="The release's version.")


class ReleaseViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """Signed bcd releases. Installation-wide: the signatures are their authority."""

    # The body is the DSSE envelope, read raw: the signed bytes must not be re-serialised.
    parser_classes: list = []

    lookup_field = "version"
    lookup_value_regex = "[A-Za-z0-9][A-Za-z0-9._+-]{0,63}"

    def _seen(self, request: Request) -> dict[str, Any]:
        """Serializer context: releases as the caller's tenant sees them (its blocks)."""
        return {"tenant": caller_principal(request).tenant}

    @extend_schema(
        responses={
            200: ReleaseSerializer(many=True),
            **error_responses("ReleaseList", bad_request=["invalid_input", "unknown_parameter"]),
        }
    )
    def list(self, request: Request) -> Response:
        tenant = caller_principal(request).tenant

        def represent(page: list[Release]) -> Any:
            blocks = blocks_for(tenant=tenant, release_ids=[release.pk for release in page])
            return ReleaseSerializer(page, many=True, context={**self._seen(request), "blocks": blocks}).data

        return self.paginated_response(release_list(), represent)

    @extend_schema(
        request=ReleaseBlockSerializer,
        parameters=[RELEASE_VERSION],
        responses={
            200: ReleaseSerializer,
            **error_responses(
                "ReleaseBlock",
                json_body=True,
                bad_request=["invalid_input"],
                not_found=["not_found"],
                conflict=["invalid_state"],
            ),
        },
    )
    @action(detail=True, methods=["post"], parser_classes=[StrictJSONParser])
    def block(self, request: Request, version: str) -> Response:
        """Block the release in the caller's tenant: its rollouts there pause.

        See docs/controller.md#blocking-a-release-per-tenant."""
        serializer = ReleaseBlockSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        release = release_block(
            tenant=caller_principal(request).tenant,
            version=version,
            reason=serializer.validated_data["reason"],
            blocked_by=caller_principal(request).user,
            actor=caller_actor(request),
        )
        return Response(ReleaseSerializer(release, context=self._seen(request)).data)

    @extend_schema(
        request=None,
        parameters=[RELEASE_VERSION],
        responses={
            200: ReleaseSerializer,
            **error_responses("ReleaseUnblock", not_found=["not_found"], conflict=["invalid_state"]),
        },
    )
    @action(detail=True, methods=["post"], parser_classes=[StrictJSONParser])
    def unblock(self, request: Request, version: str) -> Response:
        """Lift the caller's tenant's block of the release."""
        release = release_unblock(tenant=caller_principal(request).tenant, version=version, actor=caller_actor(request))
        return Response(ReleaseSerializer(release, context=self._seen(request)).data)

    @extend_schema(
        request={"application/json": DsseEnvelopeSerializer},
        examples=[ENVELOPE_EXAMPLE],
        responses={
            201: OpenApiResponse(ReleaseSerializer, description="Registered."),
            200: OpenApiResponse(ReleaseSerializer, description="The same manifest again: the first registration."),
            **error_responses(
                "ReleaseRegister",
                body=True,
                bad_request=[
                    "invalid_envelope",
                    "invalid_manifest",
                    "wrong_payload_type",
                    "wrong_product",
                    "threshold_not_met",
                    "too_many_signatures",
                ],
                conflict=["sequence_not_increasing", "version_exists"],
                unavailable=["no_release_keys"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        registration = release_register(
            envelope=envelope_bytes(request),
            registered_by=caller_principal(request).user,
            actor=caller_actor(request),
            audit_tenant=caller_principal(request).tenant,
        )
        code = status.HTTP_201_CREATED if registration.created else status.HTTP_200_OK
        return Response(ReleaseSerializer(registration.release, context=self._seen(request)).data, status=code)
