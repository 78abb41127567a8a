"""Wakes for watching agents (docs/fleet.md#watch): PostgreSQL triggers NOTIFY the ids of the nodes whose spec or
pending commands a statement changed, on the channel ``fleet_watch`` (fleet.services.watch.NOTIFY_CHANNEL).

Triggers hold for every writer by construction (services, admin, raw SQL, code written later). NOTIFY is
transactional: delivered after the commit, never for a rollback. Statement-level triggers with transition
tables: a tick that starts 5,000 nodes sends about 21 notifications from inside its own statements, no round
trip each. A payload holds at most 240 ids (32 hex digits and a comma each: under the 8,000-byte limit).
Channels are per database, so two databases on one server never wake each other.

"""

from django.db import migrations


FORWARD = """
CREATE FUNCTION fleet_watch_notify(node_ids uuid[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    FOR payload IN
        SELECT string_agg(replace(id::text, '-', ''), ',')
        FROM (SELECT id, (row_number() OVER () - 1) / 240 AS chunk FROM (SELECT DISTINCT unnest(node_ids) AS id) d) c
        GROUP BY chunk
    LOOP
        PERFORM pg_notify('fleet_watch', payload);
    END LOOP;
END $$;

CREATE FUNCTION fleet_node_spec_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(ARRAY(
        SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id WHERE n.spec IS DISTINCT FROM o.spec
    ));
    RETURN NULL;
END $$;

CREATE TRIGGER fleet_node_spec_watch AFTER UPDATE ON fleet_node
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_node_spec_watch();

CREATE FUNCTION fleet_command_insert_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(ARRAY(SELECT node_id FROM new_rows WHERE state = 'pending'));
    RETURN NULL;
END $$;

CREATE TRIGGER fleet_command_insert_watch AFTER INSERT ON fleet_command
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_command_insert_watch();

-- A row that is or was pending and changed in anything an answer shows (or moved to another node).
CREATE FUNCTION fleet_command_update_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(ARRAY(
        SELECT unnest(ARRAY[o.node_id, n.node_id])
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE (o.state = 'pending' OR n.state = 'pending')
          AND (o.state, o.kind, o.payload, o.node_id) IS DISTINCT FROM (n.state, n.kind, n.payload, n.node_id)
    ));
    RETURN NULL;
END $$;

CREATE TRIGGER fleet_command_update_watch AFTER UPDATE ON fleet_command
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_command_update_watch();

CREATE FUNCTION fleet_command_delete_watch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM fleet_watch_notify(ARRAY(SELECT node_id FROM old_rows WHERE state = 'pending'));
    RETURN NULL;
END $$;

CREATE TRIGGER fleet_command_delete_watch AFTER DELETE ON fleet_command
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_command_delete_watch();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS fleet_command_delete_watch ON fleet_command;
DROP TRIGGER IF EXISTS fleet_command_update_watch ON fleet_command;
DROP TRIGGER IF EXISTS fleet_command_insert_watch ON fleet_command;
DROP TRIGGER IF EXISTS fleet_node_spec_watch ON fleet_node;
DROP FUNCTION IF EXISTS fleet_command_delete_watch();
DROP FUNCTION IF EXISTS fleet_command_update_watch();
DROP FUNCTION IF EXISTS fleet_command_insert_watch();
DROP FUNCTION IF EXISTS fleet_node_spec_watch();
DROP FUNCTION IF EXISTS fleet_watch_notify(uuid[]);
"""


class Migration(migrations.Migration):
    dependencies = [("fleet", "0004_pool_maintenance_windows")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
