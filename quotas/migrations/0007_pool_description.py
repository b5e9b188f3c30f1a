from django.db import migrations, models


class Migration(migrations.Migration):
    """Pools become objects a platform admin makes (issue 24): each gets a description. Existing
    nodes and quotas already belong to the default pool (their pool column is not null), so
    nothing else moves."""

    dependencies = [("quotas", "0006_slurm_executor")]

    operations = [
        migrations.AddField(
            model_name="resourcepool",
            name="description",
            field=models.CharField(blank=True, default="", max_length=2000),
        ),
    ]
