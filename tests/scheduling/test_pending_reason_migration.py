"""Migration 0009 moves the reasons the engine wrote on pending jobs (those with a queue position)
into their own table at the job's revision, clears them from the job, and leaves the others (a
preempted job's own reason, a final message) where they are; backwards, it puts them back."""

from __future__ import annotations

import pytest

from tests.scheduling.migrating import back_to_the_latest_schema, migrate

# The tests after these on the same worker share its database: back to the latest schema.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures(back_to_the_latest_schema.__name__)]

BEFORE = [("scheduling", "0008_job_fillfactor")]
AFTER = [("scheduling", "0009_pending_reason")]



def test_the_engines_reasons_move_to_their_own_table_and_back(cluster: object) -> None:
    from tests.scheduling.conftest import Cluster

    assert isinstance(cluster, Cluster)
    waiting = cluster.submit("waiting", gpus=1)
    preempted = cluster.submit("preempted", gpus=1)
    apps = migrate(BEFORE).loader.project_state(BEFORE).apps
    Job = apps.get_model("scheduling", "Job")
    Job.objects.filter(pk=waiting.pk).update(
        state="pending", reason_code="no_fit", reason_message="needs 1 GPU", position=2, revision=3
    )
    Job.objects.filter(pk=preempted.pk).update(state="pending", reason_code="preempted", reason_message="evicted")

    apps = migrate(AFTER).loader.project_state(AFTER).apps
    Job, PendingReason = apps.get_model("scheduling", "Job"), apps.get_model("scheduling", "PendingReason")
    moved = PendingReason.objects.get(job_id=waiting.pk)
    assert (moved.revision, moved.code, moved.message, moved.position) == (3, "no_fit", "needs 1 GPU", 2)
    assert Job.objects.filter(pk=waiting.pk).values_list("reason_code", "position").get() == ("", None)
    assert not PendingReason.objects.filter(job_id=preempted.pk).exists()
    assert Job.objects.get(pk=preempted.pk).reason_code == "preempted"

    apps = migrate(BEFORE).loader.project_state(BEFORE).apps
    Job = apps.get_model("scheduling", "Job")
    assert Job.objects.filter(pk=waiting.pk).values_list("reason_code", "position").get() == ("no_fit", 2)

