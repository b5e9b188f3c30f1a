"""The Slurm jobs the console submitted: one per replica, kept after it ends (the job page shows its id)."""

from __future__ import annotations

from django.db import models


class SlurmJob(models.Model):
    """One replica of a console job as one Slurm batch job, or one task of a job array.

    The row is written before `sbatch` runs (`slurm_id` empty until it answers): a second tick,
    or a console restarted meanwhile, finds the row and never submits the replica twice; a row
    whose id never came back is matched to Slurm's job by its name (`gqc-<console>-<job>-<replica>`,
    slurm.naming: only this console's).
    `replica` is the placement's id as a plain number, as AgentProcess keeps it: the placement is
    deleted when the job lets go of its GPUs, and a Slurm job outliving it must still be stopped.
    """

    job = models.ForeignKey("scheduling.Job", on_delete=models.CASCADE, related_name="slurm_jobs")
    replica = models.PositiveBigIntegerField(unique=True)
    rank = models.PositiveIntegerField(default=0)
    node_name = models.CharField(max_length=100)
    name = models.CharField(max_length=100)
    # The array's job id and this replica's task in it (the console submits the replicas of one
    # wave on one node as one job array: slurm.submitting); no task: a job of its own.
    slurm_id = models.PositiveBigIntegerField(null=True, blank=True)
    array_task = models.PositiveIntegerField(null=True, blank=True)
    # Slurm's job state as last seen (RUNNING, COMPLETED…), or SUBMITTING before sbatch answered.
    state = models.CharField(max_length=30, default="SUBMITTING")
    exit_code = models.IntegerField(null=True, blank=True)
    # The GPU indices Slurm bound the job to (scontrol show job -d / squeue's gres_detail).
    devices = models.JSONField(default=list, blank=True)
    output = models.CharField(max_length=1000)
    output_offset = models.PositiveBigIntegerField(default=0)
    submitted_at = models.DateTimeField()
    stop_asked_at = models.DateTimeField(null=True, blank=True)
    killed_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["ended_at"], name="slurm_job_ended_at")]

    def __str__(self) -> str:
        return f"{self.name} (Slurm job {self.slurm_label}): {self.state}"

    @property
    def slurm_label(self) -> str:
        """Slurm's id of this replica as squeue shows it and scancel takes it: `12_3` for an array
        task, `12` for a job of its own; empty before sbatch answered."""
        return slurm_label(self.slurm_id, self.array_task)


def slurm_label(slurm_id: int | None, array_task: int | None) -> str:
    if slurm_id is None:
        return ""
    return str(slurm_id) if array_task is None else f"{slurm_id}_{array_task}"
