import django_filters
from django import forms

from rollout.models import NodeUpgrade, Rollout


class RolloutFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Rollout.State.choices)

    class Meta:
        model = Rollout
        fields = ["state"]


class IntegerFilter(django_filters.NumberFilter):
    """A whole number (``NumberFilter`` takes any decimal: ``?wave=1.5`` would filter, and match nothing)."""

    field_class = forms.IntegerField


class NodeUpgradeFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=NodeUpgrade.State.choices)
    wave = IntegerFilter(field_name="wave", min_value=0)

    class Meta:
        model = NodeUpgrade
        fields = ["state", "wave"]
