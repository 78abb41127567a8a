"""``rollout.paused`` names its reason ``pausedReason`` in its data, as the rollout and its blockers do; the events
stored before under ``reason`` are renamed in place (a webhook delivery not yet attempted builds its body from them)."""

from django.db import migrations

FORWARD = """
UPDATE rollout_rolloutevent
   SET data = (data - 'reason') || jsonb_build_object('pausedReason', data -> 'reason')
 WHERE kind = 'rollout.paused' AND data ? 'reason'
"""

BACKWARD = """
UPDATE rollout_rolloutevent
   SET data = (data - 'pausedReason') || jsonb_build_object('reason', data -> 'pausedReason')
 WHERE kind = 'rollout.paused' AND data ? 'pausedReason'
"""


class Migration(migrations.Migration):
    dependencies = [("rollout", "0014_tickrequest_running_until")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
