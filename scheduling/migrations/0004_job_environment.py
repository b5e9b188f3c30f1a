from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0003_agent")]

    operations: list[migrations.operations.base.Operation] = []
