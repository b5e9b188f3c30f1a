from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0004_job_environment")]

    operations = [
        migrations.AddField(
            model_name="replicaplacementrecord",
            name="start_asked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
