"""Jobs, where their replicas run, what happened to them, and the record of every cycle.

The database is the truth: a restarted worker rebuilds everything from these rows. A job's
`revision` goes up on every change of state or allocation, so that a cycle commits a decision
only while the job is exactly as its snapshot saw it.
"""

from __future__ import annotations

from typing import Final

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from django.db.models import Q


class JobKind(models.TextChoices):
    TRAINING = "training", "Training"
    INFERENCE = "inference", "Inference"
    NOTEBOOK = "notebook", "Notebook"


# SCHEDULING.md "Words": each kind's priority and preemptibility unless the submitter says otherwise.
KIND_DEFAULTS: Final[dict[str, tuple[int, bool]]] = {
    JobKind.INFERENCE: (7, False),
    JobKind.NOTEBOOK: (5, False),
    JobKind.TRAINING: (3, True),
}


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    # Evicted and inside its grace period: it still holds its GPUs until `release_at`.
    RELEASING = "releasing", "Releasing"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_STATES: Final = (JobState.PENDING, JobState.RUNNING, JobState.RELEASING)
HOLDING_STATES: Final = (JobState.RUNNING, JobState.RELEASING)
FINAL_STATES: Final = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class Job(models.Model):
    # The permissions choke point (workspaces.permissions.restrict) finds the workspace here.
    workspace_field = "workspace"
    owner_field = "owner"

    name = models.CharField(max_length=200)
    workspace = models.ForeignKey("workspaces.Workspace", on_delete=models.PROTECT, related_name="jobs")
    quota = models.ForeignKey("quotas.Quota", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    kind = models.CharField(max_length=20, choices=JobKind.choices)
    gpus = models.FloatField(help_text="GPUs per replica; below 1 a fraction of one device.")
    replicas = models.PositiveIntegerField(default=1)
    min_replicas = models.PositiveIntegerField(null=True, blank=True, help_text="None: not elastic.")
    priority = models.PositiveSmallIntegerField()
    preemptible = models.BooleanField()
    cpu = models.FloatField(default=0)
    memory_gib = models.FloatField(default=0)
    command = models.TextField(blank=True, default="")
    # NAME: value pairs the agent sets in each replica's process (scheduling.job_environment).
    environment = models.JSONField(default=dict, blank=True)
    image = models.CharField(
        max_length=512, blank=True, default="", help_text="For executors that run containers; the agent ignores it."
    )
    duration = models.FloatField(null=True, blank=True, help_text="Seconds; none: runs until ended.")
    grace_seconds = models.FloatField(default=0)
    requeue = models.BooleanField(default=True)

    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.PENDING, db_index=True)
    revision = models.PositiveIntegerField(default=0)
    allocated_gpus = models.FloatField(default=0)
    running_replicas = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    reason_code = models.CharField(max_length=50, blank=True, default="")
    reason_message = models.TextField(blank=True, default="")
    submitted_at = models.DateTimeField(db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    evicted_at = models.DateTimeField(null=True, blank=True)
    release_at = models.DateTimeField(null=True, blank=True)
    beneficiary = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="While releasing: the job it makes room for.",
    )

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["state", "quota"], name="job_state_quota")]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="job_gpus_positive"),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="job_replicas_at_least_one"),
            models.CheckConstraint(
                condition=Q(min_replicas__isnull=True)
                | (Q(min_replicas__gte=1) & Q(min_replicas__lte=models.F("replicas"))),
                name="job_min_replicas_within_replicas",
            ),
            models.CheckConstraint(condition=Q(priority__gte=1) & Q(priority__lte=9), name="job_priority_1_to_9"),
            models.CheckConstraint(
                condition=Q(cpu__gte=0) & Q(memory_gib__gte=0) & Q(grace_seconds__gte=0) & Q(allocated_gpus__gte=0),
                name="job_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(duration__isnull=True) | Q(duration__gte=0), name="job_duration_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def requested_gpus(self) -> float:
        return self.gpus * self.replicas

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def shown_reason(self) -> tuple[str, str, int | None]:
        """(code, message, position) as the job shows them: while pending, its PendingReason at
        its revision (the engine's); else, or without one, its own columns and no position (only
        the engine's reasons have one). Read jobs with `select_related("pending_reason")` (one
        join, no query per job)."""
        shown: tuple[str, str, int | None] = (self.reason_code, self.reason_message, None)
        if self.state == JobState.PENDING:
            try:
                reason = self.pending_reason
            except ObjectDoesNotExist:
                reason = None
            if reason is not None and reason.revision == self.revision:
                shown = (reason.code, reason.message, reason.position)
        # A page shows the message as its reader may read it (scheduling.mentions.show_reasons_to).
        told = self.__dict__.get("_told_message")
        return shown if told is None else (shown[0], told, shown[2])

    @property
    def shown_code(self) -> str:
        return self.shown_reason[0]

    @property
    def shown_message(self) -> str:
        return self.shown_reason[1]

    @shown_message.setter
    def shown_message(self, told: str) -> None:
        """For a page, not saved: the message as its reader may read it."""
        self.__dict__["_told_message"] = told

    @property
    def shown_position(self) -> int | None:
        return self.shown_reason[2]


class PendingReason(models.Model):
    """Why a pending job waits, as the last cycle's engine said it: its code, a sentence with the
    numbers, its position in its quota's queue (SCHEDULING.md §8). A row of its own, not columns of
    the job: a cycle rewrites the reasons of most pending jobs (all of them, 100,000 at S4, for a
    fresh worker), and a narrow table with one index takes those writes for a fifth of the CPU
    of rewriting the wide, nine-index job rows (docs/benchmarks-engine.md, "Pending reasons in a
    table of their own"). A row counts only while its job is pending at `revision`: every move of
    a job bumps its revision, so a row left behind is ignored, not deleted on the way (no
    statement more in the admissions, evictions, cancels and ends; a job's row goes with it, and
    the table holds at most one row per job that ever waited). No database constraint (its per-row check was
    0.4 s of the 0.9 s at S4); the cascade is Django's, and the commit's own join on the job is the
    guard. What is not the engine's (cancelling, preempted, a final message) stays on the job."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, db_constraint=False, related_name="pending_reason"
    )
    revision = models.PositiveIntegerField()
    code = models.CharField(max_length=50)
    message = models.TextField()
    position = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.job_id}: {self.code}"


class ReplicaPlacementRecord(models.Model):
    """Where one replica of a running (or releasing) job sits: whole devices, or a fraction of one."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey("quotas.Node", on_delete=models.PROTECT, related_name="placements")
    devices = models.JSONField(default=list)
    fraction = models.FloatField(default=1.0)
    # On an agent node: when a beat's answer first asked the agent to start it. A start not taken
    # up AGENT_START_BEATS heartbeats later is given up (scheduling.agent_services).
    start_asked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(fraction__gt=0) & Q(fraction__lte=1), name="placement_fraction_0_to_1"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} on {self.node_id} {self.devices}"

    @property
    def gpus(self) -> float:
        return self.fraction if self.fraction < 1 else float(len(self.devices))


class JobEventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    ADMITTED = "admitted", "Admitted"
    EVICTED = "evicted", "Evicted"
    REQUEUED = "requeued", "Requeued"
    STARTED = "started", "Started"
    FINISHED = "finished", "Finished"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    GROWN = "grown", "Grown"
    SHRUNK = "shrunk", "Shrunk"
    MOVED = "moved", "Moved"


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(db_index=True)
    kind = models.CharField(max_length=20, choices=JobEventKind.choices)
    rule = models.CharField(max_length=50, blank=True, default="")
    beneficiary = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    message = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind}"


class CycleRecord(models.Model):
    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField(default=0)
    trigger = models.CharField(max_length=50, blank=True, default="")
    admitted = models.PositiveIntegerField(default=0)
    evicted = models.PositiveIntegerField(default=0)
    pending = models.PositiveIntegerField(default=0)
    lock_token = models.BigIntegerField()
    lock_holder = models.CharField(max_length=200, blank=True, default="")
    decisions = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"cycle {self.lock_token} at {self.started_at:%H:%M:%S}"


class SchedulerFence(models.Model):
    """One row: the fencing token of the last committed cycle and the count of commits.

    `issued` hands out lock tokens (it lives in the database so that a flushed Redis can never
    hand out a token below one already used). A cycle commits only if its token is above the
    last committed one and no cycle committed since its snapshot (`generation` unchanged).
    """

    SINGLETON_ID: Final = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    issued = models.BigIntegerField(default=0)
    token = models.BigIntegerField(default=0)
    generation = models.BigIntegerField(default=0)
    committed_at = models.DateTimeField(null=True, blank=True)
    # When a rule that depends on the clock alone (a running job's min_runtime_seconds running
    # out while jobs wait) may change the last committed decisions: the beat runs a cycle then
    # even though no change was recorded (scheduling.changes).
    wake_at = models.DateTimeField(null=True, blank=True)
    # When a commit last wrote every pending job's moved queue position (pending_reasons.positions_held_until):
    # positions alone are written at most every SCHEDULER_POSITION_REFRESH_SECONDS.
    positions_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"fence token={self.token} generation={self.generation}"


class SchedulingChange(models.Model):
    """A write that can change the scheduler's decisions, not yet seen by a committed cycle.

    Inserted in the same transaction as the write (scheduling.changes.note); a committed cycle
    deletes the rows it read before its snapshot. Rows rather than one counter row: concurrent
    writers on PostgreSQL insert side by side instead of queueing on one row's lock, and a row
    that commits late (after a cycle read the others) is still there for the next beat.
    """

    reason = models.CharField(max_length=64, blank=True, default="")

    def __str__(self) -> str:
        return f"change {self.pk} ({self.reason})"


class AgentProcessState(models.TextChoices):
    RUNNING = "running", "Running"
    EXITED = "exited", "Exited"


class AgentProcess(models.Model):
    """What a node's agent reported about the process of one replica (AGENT.md heartbeat).

    `replica` is the id of the placement the process was started for; a placement is deleted when
    its job lets go of the GPUs, so the id is kept as a plain number: a process outliving its
    placement must still be recognised, and told to stop. One row per (node, replica): a replica is
    started once on its node, never twice.
    """

    node = models.ForeignKey("quotas.Node", on_delete=models.CASCADE, related_name="agent_processes")
    replica = models.PositiveBigIntegerField()
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="agent_processes")
    state = models.CharField(max_length=10, choices=AgentProcessState.choices)
    pid = models.PositiveIntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    exited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["node", "replica"], name="agent_process_once_per_replica")]

    def __str__(self) -> str:
        return f"replica {self.replica} of job {self.job_id} on {self.node_id}: {self.state}"


class JobLog(models.Model):
    """The last lines of a job's output, as its agents shipped them (bounded: AGENT_LOG_LINES_KEPT)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="log")
    lines = models.JSONField(default=list, blank=True)
    truncated = models.BooleanField(default=False)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"log of job {self.job_id}"


class AllocationSample(models.Model):
    """A quota's GPU figures as a cycle left them, written only when one of them changed.

    Charts draw the figures as steps: a figure holds from its sample until the quota's next one,
    so an unchanged quota costs no rows. `allocated` is the subtree's, as the quota tree shows it.
    History is kept for SCHEDULER_ALLOCATION_HISTORY_HOURS and at most
    SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS rows (scheduling.history).
    """

    quota = models.ForeignKey("quotas.Quota", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    allocated = models.FloatField()
    guaranteed = models.FloatField()
    fair_share = models.FloatField()

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            # A quota's latest sample (what the cycle compares with) and a quota's window (charts).
            models.Index(fields=["quota", "at"], name="allocation_sample_quota_at"),
            # Pruning by age.
            models.Index(fields=["at"], name="allocation_sample_at"),
        ]

    def __str__(self) -> str:
        return f"{self.quota_id} at {self.at:%H:%M:%S}: {self.allocated}/{self.guaranteed} (fair {self.fair_share})"


class ResourceFairShare(models.Model):
    """A quota's fair share of each managed resource besides GPUs, as the last cycle worked it out.

    The GPU fair share is cheap to work out again from aggregates on every read
    (scheduling.quota_figures); the CPU and memory ones are the engine's own (its
    QuotaStatus.resources), kept here so the pages and the API show the figures the scheduler
    acts on. One row per quota of a pool that manages CPU or memory, rewritten only when a figure
    moved; `shares` maps "cpu" / "memory_gib" to cores / GiB.
    """

    quota = models.OneToOneField("quotas.Quota", on_delete=models.CASCADE, primary_key=True, related_name="+")
    shares = models.JSONField(default=dict)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.quota_id}: {self.shares}"
