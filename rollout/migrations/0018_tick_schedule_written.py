"""The interval the code last wrote to ``rollout/all``: a stored interval that differs was changed in the admin
and wins over ROLLOUT_EVERY (rollout/schedules.py, docs/operations.md#the-controllers-interval)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rollout", "0017_supersede"),
    ]

    operations = [
        migrations.CreateModel(
            name="TickScheduleWritten",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("every", models.PositiveIntegerField()),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(condition=models.Q(("id", 1)), name="tick_schedule_written_one_row")
                ],
            },
        ),
    ]
