"""Pending reasons in their own table (scheduling.pending_reasons, issue 26): the cycle writes a
waiting job's reason there, not into the job's row; every reader shows it (the job, the API, the
snapshot); a reason left behind by a job that moved on is ignored; the write is guarded by the
revision the snapshot saw. On SQLite and PostgreSQL alike (the write takes a path of its own on each)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from scheduling import pending_reasons, services
from scheduling.commit_rows import DeferredReasons
from scheduling.models import Job, JobState, PendingReason
from scheduling.selectors import job_list
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


def test_a_waiting_jobs_reason_round_trips_through_its_own_table(cluster: Cluster, platform_admin: object) -> None:
    cluster.submit("filler", gpus=8)
    cluster.submit("waiter", gpus=8, replicas=2, priority=3)
    services.converge()
    waiter = cluster.job("waiter")
    assert waiter.state == JobState.PENDING
    stored = PendingReason.objects.get(job_id=waiter.pk)
    assert stored.revision == waiter.revision and stored.code and stored.message and stored.position == 1
    # Not in the job's own columns: the job row was not rewritten for it (and has no position).
    assert (waiter.reason_code, waiter.reason_message) == ("", "")
    assert "position" not in {field.name for field in Job._meta.concrete_fields}
    assert waiter.shown_reason == (stored.code, stored.message, 1)
    annotated = pending_reasons.with_shown_reason(Job.objects.filter(pk=waiter.pk))
    assert annotated.values_list("shown_reason_code", "shown_reason_position").get() == (stored.code, 1)

    api = APIClient()
    api.force_authenticate(platform_admin)  # type: ignore[arg-type]
    shown = api.get(f"/api/v1/jobs/{waiter.pk}/").json()
    assert shown["reason"] == {"code": stored.code, "message": stored.message} and shown["position"] == 1
    listed = api.get(f"/api/v1/jobs/?reason={stored.code}").json()["results"]
    assert [job["name"] for job in listed] == ["waiter"]

    # A reason left behind is ignored: the job moved on (its revision with it).
    Job.objects.filter(pk=waiter.pk).update(revision=F("revision") + 1)
    assert cluster.job("waiter").shown_reason == ("", "", None)
    assert api.get(f"/api/v1/jobs/?reason={stored.code}").json()["results"] == []


def test_the_write_is_guarded_by_the_revision_seen(cluster: Cluster) -> None:
    job = cluster.submit("waiter", gpus=16)
    services.converge()
    revision = cluster.job("waiter").revision
    assert pending_reasons.write([(job.pk, revision + 1, "no_fit", "stale", 4)]) == []
    assert PendingReason.objects.get(job_id=job.pk).message != "stale"
    assert pending_reasons.write([(job.pk, revision, "no_fit", "fresh", 4)]) == [job.pk]
    assert cluster.job("waiter").shown_reason == ("no_fit", "fresh", 4)


def test_the_first_write_into_an_empty_table_is_guarded_as_the_merge_is(cluster: Cluster) -> None:
    """An empty table takes a plain insert on PostgreSQL (no per-row conflict check): the same
    guard, the same jobs written; the next write into the filled table merges. (SQLite: one upsert.)"""
    first, second = cluster.submit("first", gpus=16), cluster.submit("second", gpus=16)
    PendingReason.objects.all().delete()
    revisions = dict(Job.objects.values_list("pk", "revision"))
    rows = [
        (first.pk, revisions[first.pk], "no_fit", "one", 0),
        (second.pk, revisions[second.pk] + 1, "no_fit", "x", 1),
    ]
    written = pending_reasons.write(rows)
    assert written == ([first.pk] if connection.vendor == "postgresql" else [])  # SQLite: all or none known
    assert list(PendingReason.objects.values_list("job_id", "message", "position")) == [(first.pk, "one", 0)]
    rows = [(first.pk, revisions[first.pk], "no_fit", "two", 1), (second.pk, revisions[second.pk], "no_fit", "y", 0)]
    assert sorted(pending_reasons.write(rows)) == sorted([first.pk, second.pk])
    stored = sorted(PendingReason.objects.values_list("job_id", "message", "position"))
    assert stored == sorted([(first.pk, "two", 1), (second.pk, "y", 0)])


def test_a_page_of_jobs_reads_their_reasons_in_the_same_query(cluster: Cluster) -> None:
    for number in range(5):
        cluster.submit(f"waiter-{number}", gpus=16)
    services.converge()
    with CaptureQueriesContext(connection) as queries:
        jobs = list(job_list(queryset=Job.objects.filter(state=JobState.PENDING)))
        shown = [job.shown_reason for job in jobs]
    assert len(shown) == 5 and all(code for code, _message, _position in shown)
    # One query for the jobs and their reasons (a join), one per prefetch: none per job.
    assert len(queries) <= 3
    assert not any(query["sql"].startswith('SELECT "scheduling_pendingreason"') for query in queries)


def test_deferred_reasons_are_written_once_and_compared_with_what_is_kept(cluster: Cluster) -> None:
    """simulate's mode (DeferredReasons): a cycle keeps the reasons instead of writing them; the
    flush writes them; a later cycle compares with the reason kept, not with the stored one."""
    cluster.submit("filler", gpus=8)
    waiter = cluster.submit("waiter", gpus=8, replicas=2, priority=3)
    deferred = DeferredReasons()
    services.run_cycle(trigger="test", deferred_reasons=deferred)
    services.run_cycle(trigger="test", deferred_reasons=deferred)
    assert cluster.job("waiter").state == JobState.PENDING
    assert not PendingReason.objects.filter(job_id=waiter.pk).exists()  # kept, not written
    assert deferred.dirty == {waiter.pk}
    deferred.flush()
    assert not deferred.dirty
    revision, code, message, position = deferred.stored[waiter.pk]
    assert code and position == 1 and cluster.job("waiter").shown_reason == (code, message, 1)

    # A reason kept but not flushed yet (as if an earlier cycle of the converge had wanted it):
    # the engine's reason differs from it, though not from the stored one, so it is kept again.
    deferred.stored[waiter.pk] = (revision, code, "an older word", 2)
    deferred.dirty.add(waiter.pk)
    services.run_cycle(trigger="test", deferred_reasons=deferred)
    assert deferred.stored[waiter.pk] == (revision, code, message, position)
    deferred.flush()
    assert cluster.job("waiter").shown_reason == (code, message, 1)
