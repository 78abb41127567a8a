"""A change to a session is notified to the web process that may remember it, not to every process
(docs/fleet.md#watch).

Each web process's hub has an ``ident`` and listens on a channel of its own, ``fleet_watch_<ident>``, besides the
shared ``fleet_watch``. A watching agent's statement that writes its session anyway (a join) and the process's
keeper, touching the nodes it holds, record it in ``watched_by`` (fleet/services/session_statements.py), and it
remembers a read only when the read names it there.
So a process other than the recorded one holds no read of the session that a change could make stale, and the
session's triggers (0007's: opened, closed, another version or protocol, seen earlier, deleted) now notify the
recorded process alone. A new record is a change too: it tells the process recorded before to forget its read.
A session no process has recorded is notified on ``fleet_watch``, as before.

Before, every process read every join's and every leave's notification: about 0.27 ms of the web tier's CPU per
upgraded node, in a tier of three processes (docs/benchmarks.md). Changes to a node's spec and pending commands,
its token and its existence stay on ``fleet_watch``: a request held for the node may be in any process.
"""

from importlib import import_module

from django.db import migrations, models

#: 0010's ``fleet_watch_notify(uuid[])``: restored as it was when this migration is reversed.
NOTIFY_BEFORE = import_module("fleet.migrations.0010_watch_notify_transaction").FORWARD

FORWARD = """
CREATE FUNCTION fleet_watch_notify(node_ids uuid[], channel text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    FOR payload IN
        SELECT string_agg(replace(id::text, '-', ''), ',')
        FROM (SELECT id, (row_number() OVER () - 1) / 240 AS chunk FROM (SELECT DISTINCT unnest(node_ids) AS id) d) c
        GROUP BY chunk
    LOOP
        PERFORM pg_notify(channel,
            'ffffffff00000' || lpad(to_hex(pg_current_xact_id()::text::bigint), 19, '0') || ',' || payload);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION fleet_watch_notify(node_ids uuid[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(node_ids, 'fleet_watch');
END $$;

-- The session's node, to the process recorded as watching it before the change (none: every process).
CREATE FUNCTION fleet_session_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(ARRAY[OLD.node_id], coalesce('fleet_watch_' || OLD.watched_by, 'fleet_watch'));
    RETURN NULL;
END $$;

DROP TRIGGER fleet_session_watch ON fleet_nodesession;
DROP TRIGGER fleet_session_delete_watch ON fleet_nodesession;

CREATE TRIGGER fleet_session_watch
    AFTER UPDATE OF left_at, daemon_version, protocol_version, node_id, last_seen_at, watched_by
    ON fleet_nodesession FOR EACH ROW
    WHEN ((OLD.left_at, OLD.daemon_version, OLD.protocol_version, OLD.node_id, OLD.watched_by)
          IS DISTINCT FROM (NEW.left_at, NEW.daemon_version, NEW.protocol_version, NEW.node_id, NEW.watched_by)
          OR NEW.last_seen_at < OLD.last_seen_at)
    EXECUTE FUNCTION fleet_session_watch();

CREATE TRIGGER fleet_session_delete_watch AFTER DELETE ON fleet_nodesession
    FOR EACH ROW EXECUTE FUNCTION fleet_session_watch();
"""

BACKWARD = (
    """
DROP TRIGGER fleet_session_watch ON fleet_nodesession;
DROP TRIGGER fleet_session_delete_watch ON fleet_nodesession;

CREATE TRIGGER fleet_session_watch AFTER UPDATE OF left_at, daemon_version, protocol_version, node_id, last_seen_at
    ON fleet_nodesession FOR EACH ROW
    WHEN ((OLD.left_at, OLD.daemon_version, OLD.protocol_version, OLD.node_id)
          IS DISTINCT FROM (NEW.left_at, NEW.daemon_version, NEW.protocol_version, NEW.node_id)
          OR NEW.last_seen_at < OLD.last_seen_at)
    EXECUTE FUNCTION fleet_row_watch('node_id');

CREATE TRIGGER fleet_session_delete_watch AFTER DELETE ON fleet_nodesession
    FOR EACH ROW EXECUTE FUNCTION fleet_row_watch('node_id');

DROP FUNCTION fleet_session_watch();
DROP FUNCTION fleet_watch_notify(uuid[], text);
"""
    + NOTIFY_BEFORE
)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0010_watch_notify_transaction")]

    operations = [
        migrations.AddField(
            model_name="nodesession",
            name="watched_by",
            field=models.CharField(blank=True, editable=False, max_length=16, null=True),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
