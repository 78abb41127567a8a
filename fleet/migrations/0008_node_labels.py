"""Node labels (docs/api.md#labels): a jsonb object with a GIN index for selectors.

The CHECK constraint keeps every writer (the bulk endpoint's one UPDATE included) at an object of at most 64
labels; the count is an IMMUTABLE SQL function, since a CHECK cannot hold a subquery.
"""

import django.contrib.postgres.indexes
from django.db import migrations, models

LABELS_LIMIT = """
CREATE FUNCTION fleet_labels_count(labels jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT count(*)::integer FROM jsonb_object_keys(labels) $$;
ALTER TABLE fleet_node ADD CONSTRAINT node_labels_at_most_64
    CHECK (jsonb_typeof(labels) = 'object' AND fleet_labels_count(labels) <= 64);
"""

LABELS_LIMIT_REVERSE = """
ALTER TABLE fleet_node DROP CONSTRAINT node_labels_at_most_64;
DROP FUNCTION fleet_labels_count(jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0007_watch_notify_sessions"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddIndex(
            model_name="node",
            index=django.contrib.postgres.indexes.GinIndex(fields=["labels"], name="node_labels_gin"),
        ),
        migrations.RunSQL(LABELS_LIMIT, LABELS_LIMIT_REVERSE),
    ]
