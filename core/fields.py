"""Strict JSON fields: a number is a JSON number, a boolean a JSON boolean (DRF's defaults coerce "3" and 1)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

PG_INT_MAX = 2**31 - 1


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "A JSON integer is required."}

    def to_internal_value(self, data: object) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "A JSON boolean (true or false) is required."}

    def to_internal_value(self, data: object) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "A JSON string is required."}

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField):
    default_error_messages = {"invalid": "A JSON string is required."}

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictChoiceField(serializers.ChoiceField):
    """A JSON string among the choices (DRF's ChoiceField matches ``str(data)``, so 1 would match "1")."""

    default_error_messages = {"invalid_type": "A JSON string is required."}

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid_type")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    default_error_messages = {"invalid": "A UUID string is required."}

    def to_internal_value(self, data: object) -> UUID:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.OBJECT)
class JSONObjectField(serializers.JSONField):
    """A JSON object rendered as stored, described as an object (JSONField's schema is "any")."""


@extend_schema_field(OpenApiTypes.NUMBER)
class StrictNumberField(serializers.Field[int | float, object, int | float, Any]):
    """A JSON number (integer or float), passed through as is: no "5" and no true."""

    default_error_messages = {"invalid": "A JSON number is required."}

    def to_internal_value(self, data: object) -> int | float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return data

    def to_representation(self, value: int | float) -> int | float:
        return value


# drf-spectacular would describe a DecimalField as a string; this one takes and renders a JSON number.
@extend_schema_field({"type": "number", "minimum": 0, "maximum": 1, "description": "A fraction, at most 5 decimals."})
class FractionField(serializers.DecimalField):
    """A JSON number in [0, 1], kept exact as a Decimal (0.07 stays 0.07); rendered as a JSON number."""

    default_error_messages = {"invalid": "A JSON number is required."}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_digits", 6)
        kwargs.setdefault("decimal_places", 5)
        kwargs.setdefault("min_value", Decimal(0))
        kwargs.setdefault("max_value", Decimal(1))
        super().__init__(**kwargs)

    def to_internal_value(self, data: object) -> Decimal:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)

    # A JSON number where DRF's DecimalField renders a string: the override widens the declared type.
    def to_representation(self, value: Decimal) -> float:  # type: ignore[override]
        return float(value)


class StrictSerializer(serializers.Serializer[Any]):
    """Refuses fields it does not know (a typo such as ``disruptionbudget`` is an error, not a default)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - {name for name, field in self.fields.items() if not field.read_only})
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


# A response body: every field is always rendered, so the schema marks every field required (DRF makes
# a model field with a default, blank or null optional, right for input only). A comment, not a
# docstring: drf-spectacular would show a docstring as the description of every subclass's component.
class ResponseModelSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]  # generic over any model
    def get_extra_kwargs(self) -> dict[str, Any]:
        extra_kwargs = super().get_extra_kwargs()
        for name in self.Meta.fields:
            extra_kwargs.setdefault(name, {}).setdefault("required", True)
        return extra_kwargs
