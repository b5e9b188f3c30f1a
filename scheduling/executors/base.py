"""What an executor is: the part that carries committed decisions out on real (or simulated) hosts.

The database is the truth. The cycle commits a decision first; then the executor is told
(`on_admitted_many`, `on_evicted`) and reports back through the services (`finish_job`, `fail_job`)
and `tick`, which the worker calls every second or so and at the end of every cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from scheduling.models import Job


@runtime_checkable
class Executor(Protocol):
    name: str

    def on_admitted(self, job: Job) -> None:
        """The job was committed as running on its placements: start its replicas."""

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        """All the jobs one commit admitted, in the engine's order (the cycle calls this one).

        An executor may write what it records for them in one go; `on_admitted(job)` is this
        with one job.
        """

    def on_evicted(self, job: Job) -> None:
        """The job was evicted: signal it to stop; its GPUs are released after `grace_seconds`."""

    def tick(self, now: datetime) -> int:
        """Report what happened by `now` (finished jobs, grace periods over); returns jobs changed."""
        ...
