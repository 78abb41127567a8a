"""The rollout module's API: thin views over rollout/services."""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from django.core.exceptions import RequestDataTooBig
from django.db.models import QuerySet
from django.http import FileResponse, HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import InvalidInput, NotFound
from core.pagination import PaginatedViewMixin
from core.parsers import StrictJSONParser
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
    ReleaseBlockSerializer,
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
from rollout.models import NodeUpgrade, Release, Rollout, Webhook
from rollout.release.dsse import MAX_ENVELOPE_BYTES
from rollout.selectors import rollout_waves
from rollout.services.blockers import node_blockers, rollout_blockers
from rollout.services.blocks import blocks_for, release_block, release_unblock
from rollout.services.create import rollout_create, rollout_plan
from rollout.services.releases import release_binary_open, release_list, release_register
from rollout.services.rollouts import rollout_abort, rollout_pause, rollout_promote, rollout_resume, rollouts_for
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


RELEASE_VERSION = OpenApiParameter("version", str, OpenApiParameter.PATH, description="The release's version.")


class ReleaseViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """Signed bcd releases. Installation-wide: the signatures are their authority."""

    # The body is the DSSE envelope, read raw: the signed bytes must not be re-serialised.
    parser_classes: list = []

    lookup_field = "version"
    lookup_value_regex = "[A-Za-z0-9][A-Za-z0-9._+-]{0,63}"

    def _seen(self, request: Request) -> dict[str, Any]:
        """Serializer context: releases as the caller's tenant sees them (its blocks)."""
        return {"tenant": _principal(request).tenant}

    @extend_schema(
        responses={200: ReleaseSerializer(many=True), **error_responses("ReleaseList", bad_request=["invalid_input"])}
    )
    def list(self, request: Request) -> Response:
        tenant = _principal(request).tenant

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
        """Block the release in the caller's tenant (CONTRACT 9.5): its rollouts there pause."""
        serializer = ReleaseBlockSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        release = release_block(
            tenant=_principal(request).tenant,
            version=version,
            reason=serializer.validated_data["reason"],
            blocked_by=_principal(request).user,
            actor=_actor(request),
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
        release = release_unblock(tenant=_principal(request).tenant, version=version, actor=_actor(request))
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
            envelope=_envelope_bytes(request),
            registered_by=_principal(request).user,
            actor=_actor(request),
            audit_tenant=_principal(request).tenant,
        )
        code = status.HTTP_201_CREATED if registration.created else status.HTTP_200_OK
        return Response(ReleaseSerializer(registration.release, context=self._seen(request)).data, status=code)


def download_binary(request: HttpRequest, version: str, platform: str) -> HttpResponseBase:
    """``GET {downloadsUrl}/bcd/{version}/linux-{arch}``: the stored bytes of a registered binary.

    Unauthenticated on purpose: integrity comes from the sha256 in the signed
    manifest, which agents check before running anything. Unknown, not
    uploaded or missing bytes are a 404 with the API's JSON body, never a 500.
    """
    try:
        binary, handle = release_binary_open(version=version, platform=platform)
    except NotFound as exc:
        return JsonResponse({"code": "not_found", "detail": exc.detail}, status=404)
    response = FileResponse(
        handle,
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
ROLLOUT_RESUME_RESPONSES = {
    200: RolloutSerializer,
    **error_responses("RolloutResume", not_found=["not_found"], conflict=["invalid_state", "release_blocked"]),
}


class RolloutViewSet(PaginatedViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Wave rollouts of the caller's tenant. Another tenant's rollout is a 404."""

    serializer_class = RolloutSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = RolloutFilter
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"

    def get_queryset(self) -> QuerySet[Rollout]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular: no caller, only the model
            return Rollout.objects.none()
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
        context = {
            **self.get_serializer_context(),
            "waves": rollout_waves(rollouts),
            "blockers": rollout_blockers(rollouts, now=timezone.now()),
        }
        # many=True builds a ListSerializer, whose data is a list (the stubs type the call as one Serializer).
        return cast(list[dict[str, Any]], RolloutSerializer(rollouts, many=True, context=context).data)

    @extend_schema(
        responses={200: RolloutSerializer(many=True), **error_responses("RolloutList", bad_request=["invalid_input"])}
    )
    def list(self, request: Request) -> Response:
        # Waves are built for the page's rollouts only: a constant number of queries per page.
        return self.paginated_response(self.filter_queryset(self.get_queryset()), self._represent)

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
                bad_request=[
                    "invalid_input",
                    "invalid_waves",
                    "unknown_version",
                    "unknown_pool",
                    "no_nodes",
                    "release_blocked",
                ],
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
        return self.paginated_response(upgrades.qs.select_related("rollout"), _represent_upgrades)

    @extend_schema(
        parameters=[
            ROLLOUT_ID,
            OpenApiParameter("node_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The node's id."),
        ],
        responses={200: NodeUpgradeSerializer, **error_responses("RolloutNode", not_found=["not_found"])},
    )
    @action(detail=True, methods=["get"], url_path=r"nodes/(?P<node_id>[^/]+)")
    def node(self, request: Request, pk: str | None = None, node_id: str | None = None) -> Response:
        """One node's row of the rollout, with its blocker (CONTRACT 10.1); 404 when the rollout has no such node."""
        rollout = self.get_object()
        try:
            node_uuid = UUID(str(node_id))
        except ValueError as exc:
            raise NotFound("No such node in this rollout.") from exc
        upgrade = NodeUpgrade.objects.filter(rollout=rollout, node_id=node_uuid).select_related("rollout").first()
        if upgrade is None:
            raise NotFound("No such node in this rollout.")
        return Response(_represent_upgrades([upgrade])[0])

    @extend_schema(
        filters=False,
        parameters=[ROLLOUT_ID],
        responses={
            200: RolloutEventSerializer(many=True),
            **error_responses("RolloutEvents", bad_request=["invalid_input"], not_found=["not_found"]),
        },
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        rollout = self.get_object()
        events = rollout.events.order_by("at", "id")
        return self.paginated_response(events, lambda page: RolloutEventSerializer(page, many=True).data)

    @extend_schema(request=None, parameters=[ROLLOUT_ID], responses=ROLLOUT_ACTION_RESPONSES)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        rollout = rollout_pause(
            rollout_id=self.get_object().id, tenant=_principal(request).tenant, actor=_actor(request)
        )
        return Response(self._fresh(rollout.id))

    @extend_schema(request=None, parameters=[ROLLOUT_ID], responses=ROLLOUT_RESUME_RESPONSES)
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


class WebhookViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """The tenant's webhooks (CONTRACT 10.3). Another tenant's webhook is a 404."""

    lookup_value_regex = "[^/]+"

    @extend_schema(
        responses={200: WebhookSerializer(many=True), **error_responses("WebhookList", bad_request=["invalid_input"])}
    )
    def list(self, request: Request) -> Response:
        webhooks = Webhook.objects.filter(tenant=_principal(request).tenant).order_by("created_at")
        return self.paginated_response(webhooks, lambda page: WebhookSerializer(page, many=True).data)

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
            **error_responses("WebhookDeliveries", bad_request=["invalid_input"], not_found=["not_found"]),
        },
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        rows = deliveries_for(tenant=_principal(request).tenant, webhook_id=_webhook_id(pk))
        return self.paginated_response(rows, lambda page: WebhookDeliverySerializer(page, many=True).data)


def _represent_upgrades(page: list[NodeUpgrade]) -> list[dict[str, Any]]:
    """Node rows with their blockers, computed for the page at once (a constant number of queries)."""
    blockers = node_blockers(page, now=timezone.now())
    return cast(list[dict[str, Any]], NodeUpgradeSerializer(page, many=True, context={"blockers": blockers}).data)


def _actor(request: Request) -> Actor:
    return Actor.api(request.user)
