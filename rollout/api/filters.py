import django_filters

from rollout.models import NodeUpgrade, Rollout


class RolloutFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Rollout.State.choices)

    class Meta:
        model = Rollout
        fields = ["state"]


class NodeUpgradeFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=NodeUpgrade.State.choices)
    wave = django_filters.NumberFilter(field_name="wave", min_value=0)

    class Meta:
        model = NodeUpgrade
        fields = ["state", "wave"]
