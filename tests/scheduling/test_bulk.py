"""scheduling.bulk: the commit's set-based writes, on the database the suite runs on.

PostgreSQL takes the rows as one JSON document (json_to_recordset), SQLite as one executemany:
both must store exactly what Django would, and change a job only at the state and revision
the caller saw.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduling import bulk
from scheduling.models import Job, JobEvent, JobState, ReplicaPlacementRecord
from tests.scheduling.conftest import Cluster

AT = datetime(2026, 11, 21, 10, 30, 15, 123456, tzinfo=UTC)


def test_insert_stores_datetimes_json_and_nulls_as_django_does_in_the_rows_order(cluster: Cluster) -> None:
    job = cluster.submit("train", gpus=2)
    other = cluster.submit("serve", gpus=1)
    kinds = ["evicted", "requeued", "admitted", "started"]
    bulk.insert(
        JobEvent,
        ("job_id", "kind", "at", "rule", "beneficiary_id", "message"),
        [
            (job.pk, kind, AT, "reclaim" if kind == "evicted" else "", other.pk if n == 0 else None, f"#{n} ünï")
            for n, kind in enumerate(kinds)
        ],
    )
    events = list(JobEvent.objects.filter(job=job, at=AT).order_by("id"))
    assert [event.kind for event in events] == kinds
    assert events[0].at == AT and events[0].rule == "reclaim" and events[0].beneficiary_id == other.pk
    assert events[1].beneficiary_id is None and events[3].message == "#3 ünï"

    bulk.insert(
        ReplicaPlacementRecord,
        ("job_id", "node_id", "devices", "fraction"),
        [(job.pk, cluster.nodes["gpu-1"].pk, [0, 1], 1.0), (other.pk, cluster.nodes["gpu-2"].pk, [3], 0.5)],
    )
    stored = {(p.job_id, tuple(p.devices), p.fraction) for p in ReplicaPlacementRecord.objects.all()}
    assert stored == {(job.pk, (0, 1), 1.0), (other.pk, (3,), 0.5)}


def test_update_as_seen_changes_only_the_rows_still_at_the_seen_state_and_revision(cluster: Cluster) -> None:
    seen = cluster.submit("seen")
    moved_on = cluster.submit("moved-on")
    Job.objects.filter(pk=moved_on.pk).update(revision=moved_on.revision + 1)  # changed since it was read
    release_at = AT + timedelta(seconds=30)
    changed = bulk.update_as_seen(
        Job,
        state=JobState.PENDING,
        columns=("reason_code", "preemptions", "release_at"),
        rows=[
            (seen.pk, seen.revision, "no_fit", 3, release_at),
            (moved_on.pk, moved_on.revision, "no_fit", 4, release_at),
        ],
        fixed=(("revision", "revision + 1", ()), ("evicted_at", "%s", (AT,))),
    )
    assert changed == 1
    fresh = Job.objects.get(pk=seen.pk)
    assert (fresh.reason_code, fresh.preemptions, fresh.release_at, fresh.evicted_at) == ("no_fit", 3, release_at, AT)
    assert fresh.revision == seen.revision + 1
    untouched = Job.objects.get(pk=moved_on.pk)
    assert (untouched.reason_code, untouched.preemptions, untouched.revision) == ("", 0, moved_on.revision + 1)


def test_a_column_left_out_gets_its_field_default(cluster: Cluster) -> None:
    job = cluster.submit("train")
    bulk.insert(JobEvent, ("job_id", "kind", "at"), [(job.pk, "started", AT)])
    event = JobEvent.objects.get(job=job, kind="started")
    assert (event.rule, event.message, event.beneficiary_id) == ("", "", None)


def test_nothing_to_write_runs_no_statement(cluster: Cluster, django_assert_num_queries: object) -> None:
    with django_assert_num_queries(0):  # type: ignore[operator]
        bulk.insert(JobEvent, ("job_id", "kind", "at"), [])
        assert bulk.update_as_seen(Job, state=JobState.PENDING, columns=("preemptions",), rows=[]) == 0
