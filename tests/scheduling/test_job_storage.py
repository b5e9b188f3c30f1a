"""The job table leaves room on its pages for the reasons each cycle writes (issue 26): on
PostgreSQL a pending job's reason is rewritten where its row is, a HOT update that adds no entry
to the table's indexes (none of the reason's columns is indexed), instead of a new version on
another page and an entry in every index."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime

import pytest
from django.apps import apps
from django.db import connection

from scheduling.cycle import run_cycle
from scheduling.models import Job, JobState
from tests.scheduling.conftest import build_cluster

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db,
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="fillfactor and row pages are PostgreSQL's"),
]

job_storage = importlib.import_module("scheduling.migrations.0008_job_fillfactor")


def pages_of_jobs() -> dict[int, int]:
    """Each job's page in the table (the block number of its row version's ctid)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, (ctid::text::point)[0]::int FROM scheduling_job")
        return dict(cursor.fetchall())


def job_table_options() -> list[str] | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'scheduling_job'")
        options: list[str] | None = cursor.fetchone()[0]
        return options


def test_the_reasons_a_cycle_writes_stay_on_the_jobs_pages() -> None:
    cluster = build_cluster(node_gpus=(8,))
    submitted = datetime(2026, 11, 27, tzinfo=UTC)
    Job.objects.bulk_create(
        Job(
            name=f"waiting-{number}",
            workspace=cluster.workspace,
            quota=cluster.quotas["team-a"],
            kind="training",
            gpus=16,  # more than the pool has: each stays pending, its reason written by the cycle
            priority=5,
            preemptible=True,
            submitted_at=submitted,
        )
        for number in range(120)
    )
    before = pages_of_jobs()
    first_page = [pk for pk, page in before.items() if page == 0]

    run_cycle(trigger="test")

    waiting = Job.objects.filter(pk__in=first_page)
    assert all(job.state == JobState.PENDING and job.shown_code == "exceeds_cluster" for job in waiting)
    after = pages_of_jobs()
    stayed = [pk for pk in first_page if after[pk] == 0]
    # Page 0 was filled by the bulk insert; at the default fillfactor no new version fits on it.
    assert len(stayed) >= len(first_page) // 3


def test_the_room_is_a_setting_of_the_table_that_the_migration_reverses() -> None:
    assert job_table_options() == [f"fillfactor={job_storage.FILLFACTOR}"]
    with connection.schema_editor() as editor:
        job_storage.fill_pages(apps, editor)
    assert job_table_options() is None
    with connection.schema_editor() as editor:
        job_storage.leave_room(apps, editor)
    assert job_table_options() == [f"fillfactor={job_storage.FILLFACTOR}"]
