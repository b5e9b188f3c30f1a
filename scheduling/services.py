"""Every write of the scheduling app, by its public name: callers import them from here.

Each lives with its subject: submitting jobs in `submission`, how a job ends (cancel, finish,
fail, released by a down node) in `job_endings`, a cycle for a person waiting in `manual_cycle`,
the cycle itself in `cycle`. Each write runs in one transaction with an audit record, and asks for
a cycle after commit. Bad input raises ValidationError naming the field and the numbers; an action
the user may not take raises PermissionDenied with the reason.
"""

from __future__ import annotations

from scheduling.cycle import CycleOutcome, converge, run_cycle
from scheduling.job_endings import (
    DryRun,
    Ending,
    Release,
    cancel_job,
    fail_job,
    finish_cancels,
    finish_job,
    finish_jobs,
    is_final,
    preview_cancel_job,
    release_jobs,
    release_jobs_on_down_node,
)
from scheduling.job_writes import Actor
from scheduling.manual_cycle import MANUAL_CYCLE_POLL_SECONDS, ManualCycle, run_cycle_now
from scheduling.submission import (
    JobShape,
    JobSubmission,
    SubmitPreview,
    preview_submit_job,
    submit_job,
    submit_jobs,
    validate_job_shape,
)

__all__ = [
    "MANUAL_CYCLE_POLL_SECONDS",
    "Actor",
    "CycleOutcome",
    "DryRun",
    "Ending",
    "JobShape",
    "JobSubmission",
    "ManualCycle",
    "Release",
    "SubmitPreview",
    "cancel_job",
    "converge",
    "fail_job",
    "finish_cancels",
    "finish_job",
    "finish_jobs",
    "is_final",
    "preview_cancel_job",
    "preview_submit_job",
    "release_jobs",
    "release_jobs_on_down_node",
    "run_cycle",
    "run_cycle_now",
    "submit_job",
    "submit_jobs",
    "validate_job_shape",
]
