"""Pending reasons in a table of their own (issue 26; scheduling.models.PendingReason).

The reasons the engine wrote on pending jobs (those with a queue position: a preempted job's
own reason has none and stays on the job) move to the new table at the job's revision, and the
job's columns are cleared of them, so that no reader finds the same reason twice.
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def move_reasons(apps: Any, schema_editor: Any) -> None:
    Job = apps.get_model("scheduling", "Job")
    PendingReason = apps.get_model("scheduling", "PendingReason")
    engines = Job.objects.filter(state="pending", position__isnull=False)
    rows = engines.values_list("id", "revision", "reason_code", "reason_message", "position")
    PendingReason.objects.bulk_create(
        [PendingReason(job_id=pk, revision=revision, code=code, message=message, position=position)
         for pk, revision, code, message, position in rows.iterator(chunk_size=5000)],
        batch_size=5000,
    )
    engines.update(reason_code="", reason_message="", position=None)


def move_back(apps: Any, schema_editor: Any) -> None:
    Job = apps.get_model("scheduling", "Job")
    PendingReason = apps.get_model("scheduling", "PendingReason")
    for reason in PendingReason.objects.all().iterator(chunk_size=5000):
        Job.objects.filter(pk=reason.job_id, state="pending", revision=reason.revision).update(
            reason_code=reason.code, reason_message=reason.message, position=reason.position
        )


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0008_job_fillfactor'),
    ]

    operations = [
        migrations.CreateModel(
            name='PendingReason',
            fields=[
                ('job', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='pending_reason', serialize=False, to='scheduling.job')),
                ('revision', models.PositiveIntegerField()),
                ('code', models.CharField(max_length=50)),
                ('message', models.TextField()),
                ('position', models.PositiveIntegerField(blank=True, null=True)),
            ],
        ),
        migrations.RunPython(move_reasons, move_back),
    ]
