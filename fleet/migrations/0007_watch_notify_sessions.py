"""More wakes on the watch channel (docs/fleet.md#watch): a node's session opened, closed or moved to another daemon
or protocol version, its ``last_seen_at`` moved back, its session deleted, its agent token replaced, the node deleted.

None of these changes a held answer's revision; they tell each web process that what it last read for the node is
no longer what a heartbeat would read or write (fleet/watch/known.py), so its next arrival reads the database again.
Row triggers with a WHEN clause: a heartbeat's or a touch's write of ``last_seen_at``, forward, queues nothing (a
heartbeat SETs ``protocol_version`` to the value it has, which the WHEN clause compares and skips). A join or a leave is one
notification. NOTIFY is sent after the commit, never for a rollback.
"""

from django.db import migrations


FORWARD = """
-- The row's node, named by the trigger's argument (its column), through 0005's one way of notifying.
CREATE FUNCTION fleet_row_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(ARRAY[(to_jsonb(OLD) ->> TG_ARGV[0])::uuid]);
    RETURN NULL;
END $$;

CREATE TRIGGER fleet_session_watch AFTER UPDATE OF left_at, daemon_version, protocol_version, node_id, last_seen_at
    ON fleet_nodesession FOR EACH ROW
    WHEN ((OLD.left_at, OLD.daemon_version, OLD.protocol_version, OLD.node_id)
          IS DISTINCT FROM (NEW.left_at, NEW.daemon_version, NEW.protocol_version, NEW.node_id)
          OR NEW.last_seen_at < OLD.last_seen_at)
    EXECUTE FUNCTION fleet_row_watch('node_id');

CREATE TRIGGER fleet_session_delete_watch AFTER DELETE ON fleet_nodesession
    FOR EACH ROW EXECUTE FUNCTION fleet_row_watch('node_id');

CREATE TRIGGER fleet_node_token_watch AFTER UPDATE OF agent_token_hash ON fleet_node FOR EACH ROW
    WHEN (OLD.agent_token_hash IS DISTINCT FROM NEW.agent_token_hash)
    EXECUTE FUNCTION fleet_row_watch('id');

CREATE TRIGGER fleet_node_delete_watch AFTER DELETE ON fleet_node
    FOR EACH ROW EXECUTE FUNCTION fleet_row_watch('id');
"""

BACKWARD = """
DROP TRIGGER IF EXISTS fleet_node_delete_watch ON fleet_node;
DROP TRIGGER IF EXISTS fleet_node_token_watch ON fleet_node;
DROP TRIGGER IF EXISTS fleet_session_delete_watch ON fleet_nodesession;
DROP TRIGGER IF EXISTS fleet_session_watch ON fleet_nodesession;
DROP FUNCTION IF EXISTS fleet_row_watch();
"""


class Migration(migrations.Migration):
    dependencies = [("fleet", "0006_session_writes_in_place")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
