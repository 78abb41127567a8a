"""Webhooks and their deliveries (docs/webhooks.md)."""

from __future__ import annotations

from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import NotFound
from core.pagination import PaginatedViewMixin
from fleet.interface import Scope
from rollout.api.schema import (
    error_responses,
)
from rollout.api.views.common import caller_actor, caller_principal
from rollout.api.webhook_serializers import (
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
)
from rollout.models import Webhook
from rollout.webhooks.deliveries import deliveries_for, webhook_create, webhook_delete

WEBHOOK_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The webhook's id.")


def _webhook_id(pk: str) -> UUID:
    try:
        return UUID(pk)
    except ValueError as exc:
        raise NotFound("No such webhook.", code="not_found") from exc


class WebhookViewSet(PaginatedViewMixin, viewsets.ViewSet):
    """The tenant's webhooks (docs/webhooks.md). Another tenant's webhook is a 404."""

    lookup_value_regex = "[^/]+"
    # Webhooks carry rollout events: managed with the rollouts scope (docs/api.md#scopes).
    key_scopes = {"list": Scope.READ, "deliveries": Scope.READ, "create": Scope.ROLLOUTS, "destroy": Scope.ROLLOUTS}

    @extend_schema(
        responses={
            200: WebhookSerializer(many=True),
            **error_responses("WebhookList", bad_request=["invalid_input", "unknown_parameter"]),
        }
    )
    def list(self, request: Request) -> Response:
        webhooks = Webhook.objects.filter(tenant=caller_principal(request).tenant).order_by("created_at")
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
            tenant=caller_principal(request).tenant,
            url=data["url"],
            events=data["events"],
            secret=data.get("secret"),
            actor=caller_actor(request),
        )
        return Response(WebhookCreatedSerializer(webhook).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[WEBHOOK_ID], responses={204: None, **error_responses("WebhookDelete", not_found=["not_found"])}
    )
    def destroy(self, request: Request, pk: str) -> Response:
        webhook_delete(tenant=caller_principal(request).tenant, webhook_id=_webhook_id(pk), actor=caller_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[WEBHOOK_ID],
        responses={
            200: WebhookDeliverySerializer(many=True),
            **error_responses(
                "WebhookDeliveries", bad_request=["invalid_input", "unknown_parameter"], not_found=["not_found"]
            ),
        },
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        rows = deliveries_for(tenant=caller_principal(request).tenant, webhook_id=_webhook_id(pk))
        return self.paginated_response(rows, lambda page: WebhookDeliverySerializer(page, many=True).data)
