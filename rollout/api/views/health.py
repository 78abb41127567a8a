"""``GET /api/compute/health``: is the database up, and is a controller ticking? (docs/operations.md#health)

No credentials: a load balancer, a monitoring probe or a newcomer's ``curl`` asks it. It names
nothing of any tenant.
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

from core.database import DATABASE_ERRORS, DATABASE_UNAVAILABLE, RETRY_AFTER_SECONDS
from core.times import api_datetime
from rollout.controller.health import controller_health


class ControllerHealthSerializer(serializers.Serializer):
    lastTickAt = serializers.DateTimeField(
        allow_null=True, help_text="When the periodic tick (rollout/all) last ran; null if never."
    )
    healthy = serializers.BooleanField(help_text="It ran within max(3 x ROLLOUT_EVERY, 10 s).")


class HealthSerializer(serializers.Serializer):
    database = serializers.ChoiceField(choices=["ok", "unavailable"])
    controller = ControllerHealthSerializer()


class HealthView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="health",
        responses={
            200: HealthSerializer,
            503: OpenApiResponse(HealthSerializer, description="The database is unavailable (with `code`, `detail`)."),
        },
    )
    def get(self, request: Request) -> Response:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            health = controller_health(now=timezone.now())
        except DATABASE_ERRORS:
            body = {
                **DATABASE_UNAVAILABLE,
                "database": "unavailable",
                "controller": {"lastTickAt": None, "healthy": False},
            }
            return Response(body, status=503, headers={"Retry-After": RETRY_AFTER_SECONDS})
        controller = {"lastTickAt": api_datetime(health.last_tick_at), "healthy": health.healthy}
        return Response({"database": "ok", "controller": controller})
