"""What every write of a job shares: who acts, the live events sent once the write commits, and
new jobs built for a batch."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Model

from scheduling import events
from scheduling.models import Job

Actor = AbstractBaseUser | AnonymousUser | None


def _publish_on_commit(*jobs: Job) -> None:
    # One batch: the live topics of a bulk submission are read back in one go (scheduling.live).
    batch = [events.job_event(job) for job in jobs]
    transaction.on_commit(lambda: events.publish_many(batch))


class NewJobs:
    """New `Job` objects for one batch of submissions, built positionally: Model.__init__'s fast
    path. With keyword arguments it pops one per column and, for each column left to its
    default before the last one given, catches a KeyError: a fifth of a bulk submission's
    Python time for S3's 10,000 jobs. The defaults are read once per batch, but where a default
    is made by a callable (a dict, a list), each job gets its own."""

    def __init__(self) -> None:
        fields = Job._meta.concrete_fields
        self.columns = [field.attname for field in fields]
        self.defaults = {field.attname: field.get_default() for field in fields}
        self.made = {field.attname: field for field in fields if field.has_default() and callable(field.default)}

    def build(self, columns: dict[str, Any], related: dict[str, Model | None]) -> Job:
        """A job with `columns` (by attname) and its related objects by field name, set through
        their descriptors as Job(**fields) sets them (checked, and cached on the job)."""
        for name, field in self.made.items():
            if name not in columns:
                columns[name] = field.get_default()
        defaults = self.defaults
        # Positionally, Model.__init__'s fast path; django-stubs types a model's arguments by keyword
        # (and whether it flags this call differs between set-ups), so the class is called untyped.
        make: Any = Job
        job: Job = make(*[columns[name] if name in columns else defaults[name] for name in self.columns])
        for name, value in related.items():
            setattr(job, name, value)
        return job
