"""When the commits last wrote every pending job's moved queue position (issue 26: positions alone
are written at most every SCHEDULER_POSITION_REFRESH_SECONDS; scheduling.pending_reasons.positions_held_until)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0009_pending_reason'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedulerfence',
            name='positions_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
