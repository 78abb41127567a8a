"""A watch notification names the transaction that sent it (docs/fleet.md#watch).

A web process that ran a join keeps what the join read, to hold the agent's next arrival on it
(fleet/watch/known.py); the join's own notification (its session opened, its upgrade commands done) must not
drop that read, while any other transaction's notification for the node must. The join's statement returns its
transaction id (``pg_current_xact_id_if_assigned``), and every notification now starts with the id of the
transaction that sent it (``pg_current_xact_id``: a trigger runs in a transaction that wrote, which has one).

The id is written as one more item of the payload's comma-separated list, shaped as the node ids are (32 hex
digits): ``ffffffff00000`` and the id in hex, zero-padded. Version 0 in a UUID's place is no random (version 4)
node id, and a web process still running the code before this migration (a rolling deploy, a host not restarted
yet) reads it as the id of a node that does not exist: harmless, where another payload shape would make it drop
every notification. At most 240 node ids and this one, of 33 characters each: under the 8,000-byte limit.
"""

from django.db import migrations

NOTIFY = """
CREATE OR REPLACE FUNCTION fleet_watch_notify(node_ids uuid[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    FOR payload IN
        SELECT string_agg(replace(id::text, '-', ''), ',')
        FROM (SELECT id, (row_number() OVER () - 1) / 240 AS chunk FROM (SELECT DISTINCT unnest(node_ids) AS id) d) c
        GROUP BY chunk
    LOOP
        PERFORM pg_notify('fleet_watch', {prefix}payload);
    END LOOP;
END $$;
"""

FORWARD = NOTIFY.format(prefix="'ffffffff00000' || lpad(to_hex(pg_current_xact_id()::text::bigint), 19, '0') || ',' || ")
BACKWARD = NOTIFY.format(prefix="")


class Migration(migrations.Migration):
    dependencies = [("fleet", "0009_tenant_rollout_approvals")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
