"""The job's own `position` column goes: since 0009 a queue position lives only with the engine's
reason in scheduling.models.PendingReason, and nothing wrote the job's column but NULL (a job that
is not pending has no position). Backwards the column comes back empty, which is all it held;
going back past 0009 then puts the pending reasons' positions on it again."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0010_fence_positions_at'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='job',
            name='position',
        ),
    ]
