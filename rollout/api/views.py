"""The rollout module's API: thin views over rollout/services."""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.core.exceptions import RequestDataTooBig
from django.core.files.storage import default_storage
from django.db.models import QuerySet
from django.http import FileResponse, Http404, HttpRequest
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import InvalidInput, NotFound
from fleet.interface import Actor, Principal
from rollout.api.filters import NodeUpgradeFilter, RolloutFilter
from rollout.api.schema import (
    DRY_RUN,
    ENVELOPE_EXAMPLE,
    DsseEnvelopeSerializer,
    error_responses,
)
from rollout.api.serializers import (
    AbortSerializer,
    NodeUpgradeSerializer,
    ReleaseSerializer,
    RolloutCreateSerializer,
    RolloutEventSerializer,
    RolloutPlanSerializer,
    RolloutSerializer,
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
)
from rollout.models import NodeUpgrade, Rollout, Webhook
from rollout.release.dsse import MAX_ENVELOPE_BYTES
from rollout.selectors import rollout_waves
from rollout.services.releases import release_binary_get, release_list, release_register
from rollout.services.rollouts import (
    rollout_abort,
    rollout_create,
    rollout_pause,
    rollout_plan,
    rollout_promote,
    rollout_resume,
    rollouts_for,
)
from rollout.services.webhooks import deliveries_for, webhook_create, webhook_delete


def _principal(request: Request) -> Principal:
    # Every view here runs behind ApiKeyAuthentication and FleetAdmin: ``request.auth`` is the caller's
    # Principal and ``request.user`` its user.
    return cast(Principal, request.auth)


def _envelope_bytes(request: Request) -> bytes:
    """The raw request body, refused before reading when it is larger than an envelope may be."""
    too_big = InvalidInput(f"The envelope is larger than {MAX_ENVELOPE_BYTES} bytes.", code="invalid_envelope")
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


class ReleaseViewSet(viewsets.ViewSet):
    """Signed bcd releases. Installation-wide: the signatures are their authority."""

    # The body is the DSSE envelope, read raw: the signed bytes must not be re-serialised.
    parser_classes: list = []

    @extend_schema(responses={200: ReleaseSerializer(many=True), **error_responses("ReleaseList")})
    def list(self, request: Request) -> Response:
        return Response(ReleaseSerializer(release_list(), many=True).data)

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
            envelope=_envelope_bytes(request),
            registered_by=_principal(request).user,
            actor=_actor(request),
            audit_tenant=_principal(request).tenant,
        )
        code = status.HTTP_201_CREATED if registration.created else status.HTTP_200_OK
        return Response(ReleaseSerializer(registration.release).data, status=code)


def download_binary(request: HttpRequest, version: str, platform: str) -> FileResponse:
    """``GET {downloadsUrl}/bcd/{version}/linux-{arch}``: the stored bytes of a registered binary.

    Unauthenticated on purpose: integrity comes from the sha256 in the signed
    manifest, which agents check before running anything.
    """
    try:
        binary = release_binary_get(version=version, platform=platform)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    if binary.stored_at is None or not default_storage.exists(binary.storage_name):
        raise Http404("This binary is registered but its bytes were not uploaded.")
    response = FileResponse(
        default_storage.open(binary.storage_name, "rb"),
        content_type="application/octet-stream",
        as_attachment=True,
        filename=f"bcd-{version}-{platform}",
    )
    response["Content-Length"] = str(binary.size)
    response["X-Checksum-Sha256"] = binary.sha256
    return response


def _is_true(value: str | None) -> bool:
    return (value or "").lower() in {"1", "true", "yes"}


ROLLOUT_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The rollout's id.")
ROLLOUT_ACTION_RESPONSES = {
    200: RolloutSerializer,
    **error_responses("RolloutAction", not_found=["not_found"], conflict=["invalid_state"]),
}


class RolloutViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Wave rollouts of the caller's tenant. Another tenant's rollout is a 404."""

    serializer_class = RolloutSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = RolloutFilter
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"

    def get_queryset(self) -> QuerySet[Rollout]:
        return rollouts_for(tenant=_principal(self.request).tenant)

    def get_object(self) -> Rollout:
        try:
            rollout_id = UUID(self.kwargs["pk"])
        except ValueError as exc:
            raise NotFound("No such rollout.") from exc
        return get_object_or_404(self.get_queryset(), pk=rollout_id)

    def get_serializer_context(self) -> dict:
        return {**super().get_serializer_context(), "waves": {}}

    def _represent(self, rollouts: list[Rollout]) -> list[dict[str, Any]]:
        context = {**self.get_serializer_context(), "waves": rollout_waves(rollouts)}
        # many=True builds a ListSerializer, whose data is a list (the stubs type the call as one Serializer).
        return cast(list[dict[str, Any]], RolloutSerializer(rollouts, many=True, context=context).data)

    @extend_schema(
        responses={200: RolloutSerializer(many=True), **error_responses("RolloutList", bad_request=["invalid_input"])}
    )
    def list(self, request: Request) -> Response:
        rollouts = list(self.filter_queryset(self.get_queryset()))
        return Response(self._represent(rollouts))

    @extend_schema(
        parameters=[ROLLOUT_ID],
        responses={200: RolloutSerializer, **error_responses("RolloutRetrieve", not_found=["not_found"])},
    )
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(self._represent([self.get_object()])[0])

    def _fresh(self, rollout_id: UUID) -> dict[str, Any]:
        return self._represent([self.get_queryset().get(pk=rollout_id)])[0]

    @extend_schema(
        request=RolloutCreateSerializer,
        parameters=[DRY_RUN],
        responses={
            201: OpenApiResponse(RolloutSerializer, description="Created (the rollout, CONTRACT 4.5)."),
            200: OpenApiResponse(RolloutPlanSerializer, description="`?dryRun=true`: the plan; nothing written."),
            **error_responses(
                "RolloutCreate",
                json_body=True,
                bad_request=["invalid_input", "invalid_waves", "unknown_version", "unknown_pool", "no_nodes"],
                conflict=["conflict"],
                unavailable=["no_downloads_url"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        serializer = RolloutCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        tenant = _principal(request).tenant
        spec = serializer.spec()
        if _is_true(request.query_params.get("dryRun")):
            plan = rollout_plan(tenant=tenant, spec=spec)
            return Response(RolloutPlanSerializer(plan).data, status=status.HTTP_200_OK)
        rollout = rollout_create(tenant=tenant, spec=spec, created_by=_principal(request).user, actor=_actor(request))
        return Response(self._fresh(rollout.id), status=status.HTTP_201_CREATED)

    @extend_schema(
        filters=False,
        parameters=[
            ROLLOUT_ID,
            OpenApiParameter("state", str, enum=NodeUpgrade.State.values, description="only nodes in this state"),
            OpenApiParameter("wave", int, description="only nodes of this wave (0-based)"),
        ],
        responses={
            200: NodeUpgradeSerializer(many=True),
            **error_responses("RolloutNodes", bad_request=["invalid_input"], not_found=["not_found"]),
        },
    )
    @action(detail=True, methods=["get"])
    def nodes(self, request: Request, pk: str | None = None) -> Response:
        rollout = self.get_object()
        upgrades = NodeUpgradeFilter(
            request.query_params, queryset=NodeUpgrade.objects.filter(rollout=rollout).order_by("position")
        )
        if not upgrades.is_valid():
            raise ValidationError(upgrades.errors)
        return Response(NodeUpgradeSerializer(upgrades.qs, many=True).data)

    @extend_schema(
        filters=False,
        parameters=[ROLLOUT_ID],
        responses={200: RolloutEventSerializer(many=True), **error_responses("RolloutEvents", not_found=["not_found"])},
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        rollout = self.get_object()
        return Response(RolloutEventSerializer(rollout.events.order_by("at", "id"), many=True).data)

    @extend_schema(request=None, parameters=[ROLLOUT_ID], responses=ROLLOUT_ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_pause(
            rollout_id=self.get_object().id, tenant=_principal(request).tenant, actor=_actor(request)
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(request=None, parameters=[ROLLOUT_ID], responses=ROLLOUT_ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_resume(
            rollout_id=self.get_object().id, tenant=_principal(request).tenant, actor=_actor(request)
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=None,
        parameters=[ROLLOUT_ID],
        responses=ROLLOUT_ACTION_RESPONSES,
        description="End the current wave's soak now: the next wave starts at the next tick (`rollout.promoted`, "
        "then `rollout.wave`). 409 `invalid_state` unless the rollout is active and its current wave is soaking "
        "(settled, not the last wave, the next one not yet due).",
    )
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_promote(
            rollout_id=self.get_object().id, tenant=_principal(request).tenant, actor=_actor(request)
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(
        request=AbortSerializer,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutSerializer,
            **error_responses(
                "RolloutAbort",
                json_body=True,
                bad_request=["invalid_input"],
                not_found=["not_found"],
                conflict=["invalid_state"],
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, pk: str | None = None) -> Response:
        serializer = AbortSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rollout = rollout_abort(
            rollout_id=self.get_object().id,
            tenant=_principal(request).tenant,
            rollback=serializer.validated_data["rollback"],
            actor=_actor(request),
        )
        return Response(self._fresh(rollout.id))


WEBHOOK_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The webhook's id.")


def _webhook_id(pk: str) -> UUID:
    try:
        return UUID(pk)
    except ValueError as exc:
        raise NotFound("No such webhook.", code="not_found") from exc


class WebhookViewSet(viewsets.ViewSet):
    """The tenant's webhooks (CONTRACT 10.3). Another tenant's webhook is a 404."""

    lookup_value_regex = "[^/]+"

    @extend_schema(responses={200: WebhookSerializer(many=True), **error_responses("WebhookList")})
    def list(self, request: Request) -> Response:
        webhooks = Webhook.objects.filter(tenant=_principal(request).tenant).order_by("created_at")
        return Response(WebhookSerializer(webhooks, many=True).data)

    @extend_schema(
        request=WebhookCreateSerializer,
        responses={
            201: WebhookCreatedSerializer,
            **error_responses(
                "WebhookCreate",
                json_body=True,
                bad_request=["invalid_input", "invalid_url", "invalid_events", "invalid_secret"],
            ),
        },
    )
    def create(self, request: Request) -> Response:
        serializer = WebhookCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        webhook = webhook_create(
            tenant=_principal(request).tenant,
            url=data["url"],
            events=data["events"],
            secret=data.get("secret"),
            actor=_actor(request),
        )
        return Response(WebhookCreatedSerializer(webhook).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[WEBHOOK_ID], responses={204: None, **error_responses("WebhookDelete", not_found=["not_found"])}
    )
    def destroy(self, request: Request, pk: str) -> Response:
        webhook_delete(tenant=_principal(request).tenant, webhook_id=_webhook_id(pk), actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[WEBHOOK_ID],
        responses={
            200: WebhookDeliverySerializer(many=True),
            **error_responses("WebhookDeliveries", not_found=["not_found"]),
        },
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        rows = deliveries_for(tenant=_principal(request).tenant, webhook_id=_webhook_id(pk))
        return Response(WebhookDeliverySerializer(rows, many=True).data)


def _actor(request: Request) -> Actor:
    return Actor.api(request.user)
