"""Migration 0011 drops the job's own `position` column (a queue position lives with the engine's
reason in PendingReason since 0009); backwards the column comes back empty, and going on back past
0009 puts the pending reasons' positions on it again. The schema is looked at as the database has
it (introspection), not as the models say."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduling.models import Job, JobState, PendingReason
from tests.scheduling.conftest import Cluster
from tests.scheduling.migrating import back_to_the_latest_schema, migrate

# The tests after these on the same worker share its database: back to the latest schema.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures(back_to_the_latest_schema.__name__)]

KEPT = [("scheduling", "0010_fence_positions_at")]
DROPPED = [("scheduling", "0011_drop_job_position")]
BEFORE_REASONS = [("scheduling", "0008_job_fillfactor")]



def _job_columns() -> set[str]:
    with connection.cursor() as cursor:
        return {column.name for column in connection.introspection.get_table_description(cursor, Job._meta.db_table)}


def test_the_job_position_column_goes_and_comes_back_empty(cluster: Cluster) -> None:
    waiting = cluster.submit("waiting", gpus=1)
    running = cluster.submit("running", gpus=1)
    Job.objects.filter(pk=waiting.pk).update(state=JobState.PENDING, revision=3)
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
    PendingReason.objects.update_or_create(
        job_id=waiting.pk, defaults={"revision": 3, "code": "no_fit", "message": "needs 1 GPU", "position": 2}
    )
    assert "position" not in _job_columns()

    apps = migrate(KEPT).loader.project_state(KEPT).apps
    assert "position" in _job_columns()
    OldJob = apps.get_model("scheduling", "Job")
    assert sorted(OldJob.objects.values_list("name", "position")) == [("running", None), ("waiting", None)]
    assert apps.get_model("scheduling", "PendingReason").objects.get(job_id=waiting.pk).position == 2

    apps = migrate(BEFORE_REASONS).loader.project_state(BEFORE_REASONS).apps
    OldJob = apps.get_model("scheduling", "Job")
    assert OldJob.objects.filter(pk=waiting.pk).values_list("reason_code", "position").get() == ("no_fit", 2)
    assert OldJob.objects.filter(pk=running.pk).values_list("position", flat=True).get() is None

    migrate(DROPPED)
    assert "position" not in _job_columns()
    assert PendingReason.objects.get(job_id=waiting.pk).position == 2  # forward again: moved back to its table
    shown = {job.name: job.shown_reason for job in Job.objects.select_related("pending_reason")}
    assert shown == {"waiting": ("no_fit", "needs 1 GPU", 2), "running": ("", "", None)}

