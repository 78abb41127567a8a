"""Forms of the operators' console for rollouts.

They only parse what a person types (numbers, a list of percentages) and keep
choices within the user's tenant; the rules of a rollout (waves strictly
increasing and ending at 100, ratio in [0, 1], ...) are the service's, so the
admin shows the same codes as the API.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from django import forms
from django.db.models import Count

from fleet.interface import Pool, Tenant
from rollout.models import Release
from rollout.rollouts.spec import (
    DEFAULT_FAILURE_RATIO_MIN_SETTLED,
    DEFAULT_MAX_FAILURE_RATIO,
    DEFAULT_SOAK_SECONDS,
    DEFAULT_UPGRADE_TIMEOUT_SECONDS,
    DEFAULT_WAVES,
    RolloutSpec,
    rollout_spec,
)

WAVE_TOKEN = re.compile(r"\d+(\.\d+)?")


def parse_waves(text: str) -> list[int | float]:
    """ "1, 10, 50, 100" (commas or spaces, an optional %) -> [1, 10, 50, 100]. Whole numbers stay ints."""
    tokens = [token.removesuffix("%") for token in re.split(r"[,;\s]+", text.strip()) if token]
    if not tokens:
        raise forms.ValidationError("Enter the cumulative percentages, for example 1,10,50,100.")
    waves: list[int | float] = []
    for token in tokens:
        if not WAVE_TOKEN.fullmatch(token):
            raise forms.ValidationError(f"{token!r} is not a percentage.")
        waves.append(int(token) if token.isdigit() else float(token))
    return waves


class ReleaseChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Release) -> str:
        return f"{obj.version} (sequence {obj.sequence})"


class PoolChoiceField(forms.ModelMultipleChoiceField):
    show_tenant = False

    def label_from_instance(self, obj: Pool) -> str:
        nodes = getattr(obj, "node_count", None)
        name = f"{obj.tenant.slug} / {obj.name}" if self.show_tenant else obj.name
        return f"{name} ({nodes} nodes)" if nodes is not None else name


class RolloutCreateForm(forms.Form):
    """Create (or preview) a rollout. ``tenant`` is the staff user's tenant, or None for a superuser,
    who then picks the tenant in the form."""

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.order_by("slug"), required=False)
    version = ReleaseChoiceField(
        queryset=Release.objects.order_by("-sequence"),
        to_field_name="version",
        empty_label=None,
        help_text="A registered, signed release.",
    )
    pools = PoolChoiceField(
        queryset=Pool.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every pool of the tenant.",
    )
    selector = forms.CharField(
        required=False,
        strip=False,
        max_length=4096,
        help_text="Only the nodes whose labels match, e.g. ring=canary (empty: every node of the pools). "
        "The preview counts the matching nodes per pool before anything is created.",
    )
    start_at = forms.DateTimeField(
        label="Start at", required=False, help_text="UTC, e.g. 2026-06-01 09:00. Ahead: the rollout is scheduled."
    )
    end_by = forms.DateTimeField(label="End by", required=False, help_text="UTC: the deadline.")
    end_behavior = forms.ChoiceField(
        label="At the deadline",
        required=False,
        choices=[("", "pause (default)"), ("abort", "abort"), ("abort_rollback", "abort with rollback")],
    )
    waves = forms.CharField(
        initial=",".join(str(p) for p in DEFAULT_WAVES),
        help_text="Cumulative percentages of the nodes, strictly increasing, the last one 100.",
    )
    max_failure_ratio = forms.DecimalField(
        label="Max failure ratio",
        initial=DEFAULT_MAX_FAILURE_RATIO,
        help_text="A wave pauses the rollout when failed / (succeeded + failed) exceeds this (0 to 1).",
    )
    failure_ratio_min_settled = forms.IntegerField(
        label="Judge failures after",
        required=False,  # empty: the default
        initial=DEFAULT_FAILURE_RATIO_MIN_SETTLED,
        help_text="The wave's failure ratio is judged once this many of its nodes settled (succeeded + failed), "
        "or when all of them have. 0: from the first settled node.",
    )
    soak_seconds = forms.IntegerField(
        initial=DEFAULT_SOAK_SECONDS, help_text="Wait after a wave settles before the next one starts."
    )
    upgrade_timeout_seconds = forms.IntegerField(
        initial=DEFAULT_UPGRADE_TIMEOUT_SECONDS,
        help_text="A node that has not rejoined on the new version by then fails and goes back.",
    )
    min_ready_seconds = forms.IntegerField(
        initial=0,
        required=False,
        help_text="A node that rejoined on the new version succeeds only after staying joined on it this long "
        "(0 to 86400; 0: at once).",
    )

    def __init__(self, *args: Any, tenant: Tenant | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acting_tenant = tenant
        pools = (
            Pool.objects.select_related("tenant").annotate(node_count=Count("nodes")).order_by("tenant__slug", "name")
        )
        pool_field = cast(PoolChoiceField, self.fields["pools"])  # the declared field, copied per form
        if tenant is None:
            self.fields["tenant"].required = True
            pool_field.show_tenant = True
            pool_field.queryset = pools
        else:
            del self.fields["tenant"]
            pool_field.queryset = pools.filter(tenant=tenant)

    def clean_waves(self) -> list[int | float]:
        return parse_waves(self.cleaned_data["waves"])

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data  # what Form.clean returns
        tenant = self.chosen_tenant(data)
        strangers = [
            pool.name for pool in data.get("pools") or [] if tenant is not None and pool.tenant_id != tenant.id
        ]
        if strangers and tenant is not None:
            self.add_error("pools", f"Not pools of {tenant.slug}: {', '.join(strangers)}.")
        return data

    def chosen_tenant(self, data: dict[str, Any] | None = None) -> Tenant | None:
        data = self.cleaned_data if data is None else data
        return self.acting_tenant or data.get("tenant")

    def spec(self) -> RolloutSpec:
        """The service's spec (the form must be valid): the same one validation as the API's."""
        data = self.cleaned_data
        pools = data.get("pools") or []
        ratio: Decimal = data["max_failure_ratio"]
        return rollout_spec(
            version=data["version"].version,
            pool_ids=[str(pool.id) for pool in pools] or None,
            waves=data["waves"],
            max_failure_ratio=ratio,
            soak_seconds=data["soak_seconds"],
            upgrade_timeout_seconds=data["upgrade_timeout_seconds"],
            min_ready_seconds=data.get("min_ready_seconds"),
            failure_ratio_min_settled=data.get("failure_ratio_min_settled"),
            selector=data.get("selector") or None,
            start_at=_rfc3339(data.get("start_at")),
            end_by=_rfc3339(data.get("end_by")),
            end_behavior=data.get("end_behavior") or None,
        )


def _rfc3339(value: datetime | None) -> str | None:
    """A form's (aware) time as the API takes it: the service checks it once (``schedule_validate``)."""
    return value.isoformat() if value is not None else None
