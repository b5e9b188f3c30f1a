"""The default executor: jobs "run" for their duration, on the real clock or on a simulated one.

An admitted job starts at once; a job with a duration finishes by itself once the clock passes
started_at + duration; an evicted job keeps its GPUs for grace_seconds, then goes back to the
queue (or fails, when it asked not to be requeued). Nothing here sleeps: `tick` looks at the
clock, so `simulate` can jump hours ahead and the console's beat can tick every second.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction

from scheduling import lifecycle, triggers
from scheduling.clock import get_clock
from scheduling.models import Job, JobEventKind, JobState


class SimulatedExecutor:
    name = "simulated"

    def on_admitted(self, job: Job) -> None:
        if job.state != JobState.RUNNING:
            return
        lifecycle.add_event(
            job_id=job.pk,
            kind=JobEventKind.STARTED,
            at=get_clock().now(),
            message=f"{job.running_replicas} replica(s) started (simulated)",
        )

    def on_evicted(self, job: Job) -> None:
        # A real host would send SIGTERM now; here the grace period is only a time on the clock.
        return None

    def tick(self, now: datetime) -> int:
        return self.release_due(now) + self.finish_due(now)

    def release_due(self, now: datetime) -> int:
        """Evicted jobs whose grace period is over let go of their GPUs."""
        due = list(
            Job.objects.filter(state=JobState.RELEASING, release_at__lte=now).values(
                "id", "revision", "requeue", "grace_seconds"
            )
        )
        released = 0
        for row in due:
            with transaction.atomic():
                new_state = lifecycle.release_job(
                    job_id=row["id"],
                    seen_state=JobState.RELEASING,
                    seen_revision=row["revision"],
                    requeue=row["requeue"],
                    now=now,
                    message=f"grace period of {row['grace_seconds']:g} s over",
                )
                if new_state is not None:
                    released += 1
        if released:
            triggers.request_cycle_on_commit("released")
        return released

    def finish_due(self, now: datetime) -> int:
        """Jobs with a duration end by themselves once it has passed."""
        from scheduling.services import finish_job

        finished = 0
        candidates = Job.objects.filter(state=JobState.RUNNING, duration__isnull=False, started_at__isnull=False)
        for row in candidates.values("id", "started_at", "duration"):
            started_at, duration = row["started_at"], row["duration"]
            if started_at is None or duration is None or started_at + timedelta(seconds=duration) > now:
                continue
            job = Job.objects.filter(pk=row["id"], state=JobState.RUNNING).first()
            if job is None:
                continue
            try:
                finish_job(job=job, succeeded=True, message=f"ran for its duration of {row['duration']:g} s")
            except ValidationError:
                continue  # Cancelled or evicted in the meantime: nothing left to finish.
            finished += 1
        return finished


__all__ = ["SimulatedExecutor"]
