"""Apply a cycle's decisions to a snapshot, as the runtime does, for tests and dry runs."""

from __future__ import annotations

from dataclasses import replace

from scheduling.engine.cycle import schedule
from scheduling.engine.types import (
    PENDING,
    RELEASING,
    RUNNING,
    Admit,
    CycleResult,
    Evict,
    Grow,
    Job,
    Shrink,
    Snapshot,
)


def release_expired(snapshot: Snapshot, now: float) -> Snapshot:
    """Releasing jobs whose grace period has passed go back to the queue."""
    jobs = []
    changed = False
    for job in snapshot.jobs:
        if job.state == RELEASING and (job.evicted_at or 0) + job.grace_seconds <= now:
            job = _requeued(job)
            changed = True
        jobs.append(job)
    if not changed and snapshot.now == now:
        return snapshot
    return replace(snapshot, jobs=tuple(jobs), now=now)


def apply(snapshot: Snapshot, result: CycleResult, now: float | None = None) -> Snapshot:
    """The snapshot after the runtime carried out `result` at time `now`."""
    when = snapshot.now if now is None else now
    jobs = {job.id: job for job in snapshot.jobs}
    for decision in result.decisions:
        if isinstance(decision, Admit):
            jobs[decision.job_id] = replace(
                jobs[decision.job_id],
                state=RUNNING,
                placements=decision.placements,
                started_at=when,
                beneficiary=None,
                evicted_at=None,
            )
        elif isinstance(decision, Evict):
            job = jobs[decision.job_id]
            if decision.rule == "consolidation":
                jobs[job.id] = _requeued(job)  # moved, not displaced: it goes wherever it fits next
            elif job.grace_seconds > 0:
                jobs[job.id] = replace(job, state=RELEASING, beneficiary=decision.beneficiary, evicted_at=when)
            else:
                # Back in the queue at once, but promised away like a released victim: while its
                # beneficiary still waits (for another victim's grace), it must not take back
                # what it gave up, or it is evicted a second time for the same job.
                jobs[job.id] = replace(_requeued(job), beneficiary=decision.beneficiary)
        elif isinstance(decision, Shrink):
            job = jobs[decision.job_id]
            remaining = list(job.placements)
            for placement in decision.remove:
                remaining.remove(placement)
            jobs[job.id] = replace(job, placements=tuple(remaining))
        elif isinstance(decision, Grow):
            job = jobs[decision.job_id]
            jobs[job.id] = replace(job, placements=job.placements + decision.add)
    # A released victim keeps its beneficiary (the promise) until that job runs or is gone.
    for job in list(jobs.values()):
        if job.state == PENDING and job.beneficiary is not None:
            target = jobs.get(job.beneficiary)
            if target is None or target.state != PENDING:
                jobs[job.id] = replace(job, beneficiary=None)
    return release_expired(replace(snapshot, jobs=tuple(jobs.values()), now=when), when)


def converge(snapshot: Snapshot, max_cycles: int = 50) -> tuple[Snapshot, list[CycleResult]]:
    """Run cycles until one decides nothing, as the runtime's loop after an event."""
    results: list[CycleResult] = []
    for _ in range(max_cycles):
        result = schedule(snapshot)
        results.append(result)
        if not result.decisions:
            return snapshot, results
        snapshot = apply(snapshot, result)
    raise RuntimeError(f"no convergence after {max_cycles} cycles")


def _requeued(job: Job) -> Job:
    """Back in the queue; a victim keeps `beneficiary`, the job it was evicted for."""
    return replace(job, state=PENDING, placements=(), started_at=None, evicted_at=None)
