"""Merge of two migrations written at once on separate branches: the gates' detail and supersede."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rollout", "0016_gate_detail"),
        ("rollout", "0016_supersede"),
    ]

    operations: list[migrations.operations.base.Operation] = []
