"""Roll forward (docs/controller.md#undoing-a-bad-release): the ``superseded`` state and the supersede chain, why
a rollout was aborted, and what a gate's failures do (``onFailure``).

Rollouts aborted before this migration get their ``abortedReason`` from their ``rollout.aborted`` event: the
deadline's abort names the actor "deadline", any other is an operator's ("manual")."""

import django.db.models.deletion
from django.db import migrations, models

ABORTED_REASONS = """
UPDATE rollout_rollout AS r SET aborted_reason = CASE WHEN EXISTS (
    SELECT 1 FROM rollout_rolloutevent AS e
    WHERE e.rollout_id = r.id AND e.kind = 'rollout.aborted' AND e.data->>'actor' = 'deadline'
) THEN 'deadline' ELSE 'manual' END
WHERE r.state = 'aborted'
"""


class Migration(migrations.Migration):

    dependencies = [
        ('rollout', '0015_paused_event_paused_reason'),
    ]

    operations = [
        migrations.AddField(
            model_name='rollout',
            name='aborted_reason',
            field=models.CharField(blank=True, max_length=80, null=True),
        ),
        migrations.AddField(
            model_name='rollout',
            name='supersedes',
            field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='superseded_by', to='rollout.rollout'),
        ),
        migrations.AddField(
            model_name='rolloutgate',
            name='on_failure',
            field=models.CharField(choices=[('pause', 'pause'), ('abort', 'abort'), ('abort_rollback', 'abort with rollback')], default='pause', max_length=16),
        ),
        migrations.AlterField(
            model_name='nodeupgrade',
            name='reason',
            field=models.CharField(blank=True, choices=[('offline', "the node's agent was offline"), ('no_binary', "the release has no binary for the node's arch"), ('timeout', 'the node did not rejoin on the target version in time'), ('aborted', 'the rollout was aborted'), ('rolled_back', 'returned to its previous release'), ('previous_not_registered', 'no registered previous release to roll back to'), ('superseded', 'a newer rollout took the node (this one was superseded, or aborted)'), ('denied', 'the rollout was denied'), ('not_ready', 'the node left, went offline or changed version before minReadySeconds passed'), ('refused:bad_root', 'the node refused it: the server offered a root it could not verify'), ('refused:bad_signature', 'the node refused it: not signed by the keys it trusts'), ('refused:wrong_version', 'the node refused it: the signed release is another version'), ('refused:expired', 'the node refused it: the release has expired'), ('refused:sequence_rollback', 'the node refused it: older than a release it ran'), ('refused:digest_mismatch', 'the node refused it: the bytes are not the signed ones'), ('refused:download_failed', 'the node could not download the binary')], max_length=32, null=True),
        ),
        migrations.AlterField(
            model_name='rollout',
            name='state',
            field=models.CharField(choices=[('active', 'active'), ('paused', 'paused'), ('completed', 'completed'), ('aborted', 'aborted'), ('scheduled', 'scheduled'), ('awaiting_approval', 'awaiting approval'), ('denied', 'denied'), ('superseded', 'superseded')], default='active', max_length=32),
        ),
        migrations.AlterField(
            model_name='rolloutevent',
            name='kind',
            field=models.CharField(choices=[('rollout.created', 'rollout.created'), ('rollout.wave', 'rollout.wave'), ('rollout.paused', 'rollout.paused'), ('rollout.resumed', 'rollout.resumed'), ('rollout.promoted', 'rollout.promoted'), ('rollout.completed', 'rollout.completed'), ('rollout.aborted', 'rollout.aborted'), ('rollout.gate_failed', 'rollout.gate_failed'), ('rollout.started', 'rollout.started'), ('rollout.deadline', 'rollout.deadline'), ('rollout.approved', 'rollout.approved'), ('rollout.denied', 'rollout.denied'), ('rollout.superseded', 'rollout.superseded'), ('node_upgrade.refused', 'node_upgrade.refused')], max_length=32),
        ),
        migrations.RunSQL(ABORTED_REASONS, reverse_sql=migrations.RunSQL.noop),
    ]
