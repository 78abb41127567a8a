"""``GET /api/compute/health``: is the database up, is the broker reachable, and is a controller ticking?
(docs/operations.md#health)

No credentials: a load balancer, a monitoring probe or a newcomer's ``curl`` asks it. It names
nothing of any tenant. 200 when all three are well, 503 with the same body otherwise, so a probe that reads
only the status code sees a dead controller or an unreachable broker.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.broker import broker_reachable
from core.database import DATABASE_ERRORS, RETRY_AFTER_SECONDS
from core.times import api_datetime
from rollout.controller.health import controller_health


class ControllerHealthSerializer(serializers.Serializer):
    lastTickAt = serializers.DateTimeField(
        allow_null=True, help_text="When the periodic tick (rollout/all) last ran; null if never."
    )
    healthy = serializers.BooleanField(
        help_text="It ran within max(3 x the stored interval of rollout/all, 10 s): the beat's own schedule."
    )


#: The database's and the broker's states: one enum in the schema (SPECTACULAR_SETTINGS' ENUM_NAME_OVERRIDES).
SERVICE_STATES = ["ok", "unavailable"]


class HealthSerializer(serializers.Serializer):
    database = serializers.ChoiceField(choices=SERVICE_STATES, help_text="A query answered.")
    broker = serializers.ChoiceField(
        choices=SERVICE_STATES, help_text="A connection to the Celery broker opened within 1 s."
    )
    controller = ControllerHealthSerializer()


class HealthView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="health",
        responses={
            200: HealthSerializer,
            503: OpenApiResponse(
                HealthSerializer, description="The database or the broker is unavailable, or no controller ticks."
            ),
        },
    )
    def get(self, request: Request) -> Response:
        broker = "ok" if broker_reachable() else "unavailable"
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            health = controller_health(now=timezone.now())
        except DATABASE_ERRORS:
            body = {"database": "unavailable", "broker": broker, "controller": {"lastTickAt": None, "healthy": False}}
            return Response(body, status=503, headers={"Retry-After": RETRY_AFTER_SECONDS})
        controller = {"lastTickAt": api_datetime(health.last_tick_at), "healthy": health.healthy}
        well = broker == "ok" and health.healthy
        return Response({"database": "ok", "broker": broker, "controller": controller}, status=200 if well else 503)
