from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0004_job_environment")]

    operations: list[migrations.operations.base.Operation] = []
