"""What every write of a job shares: who acts, and the live events sent once the write commits."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from scheduling import events
from scheduling.models import Job

Actor = AbstractBaseUser | AnonymousUser | None


def _publish_on_commit(*jobs: Job) -> None:
    # One batch: the live topics of a bulk submission are read back in one go (scheduling.live).
    batch = [events.job_event(job) for job in jobs]
    transaction.on_commit(lambda: events.publish_many(batch))
