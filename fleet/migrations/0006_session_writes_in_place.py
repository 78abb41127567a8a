"""The session row is written in place (docs/operations.md#session-rows).

Every heartbeat, held node's touch, join and leave rewrites its node's ``fleet_nodesession`` row. PostgreSQL
writes such an update in place (a heap-only tuple) when no indexed column changes and the page has room: no
new index entry, and the old version is pruned by the next statement that reads the page, without VACUUM.
The index on ``last_seen_at`` had no reader (no scan in a 10,000-agent rollout) and made every one of those
writes a new entry in all three of the table's indexes; half of each page is left free for the new versions.
"""

from django.db import migrations, models



class Migration(migrations.Migration):
    dependencies = [("fleet", "0005_watch_notify")]

    operations = [
        migrations.AlterField(model_name="nodesession", name="last_seen_at", field=models.DateTimeField()),
        migrations.RunSQL(
            "ALTER TABLE fleet_nodesession SET (fillfactor = 50)", "ALTER TABLE fleet_nodesession RESET (fillfactor)"
        ),
    ]
