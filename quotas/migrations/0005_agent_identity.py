from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("quotas", "0004_node_agent_version")]

    operations = [
        migrations.AddField(
            model_name="nodeagent",
            name="start_missed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="nodeagent",
            name="start_missed",
            field=models.CharField(blank=True, default="", max_length=300),
        ),
        migrations.CreateModel(
            name="Installation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("identity", models.UUIDField(unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
