from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0003_agent")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="job",
            name="environment",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="job",
            name="image",
            field=models.CharField(
                blank=True,
                default="",
                help_text="For executors that run containers; the agent ignores it.",
                max_length=512,
            ),
        ),
    ]
