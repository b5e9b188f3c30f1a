from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("quotas", "0005_agent_identity")]

    operations = [
        migrations.AlterField(
            model_name="node",
            name="executor",
            field=models.CharField(
                choices=[("simulated", "Simulated"), ("agent", "Node agent"), ("slurm", "Slurm")],
                default="simulated",
                max_length=10,
            ),
        ),
    ]
