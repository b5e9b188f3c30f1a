"""Per-GPU samples at three resolutions, in one table.

One table with a `resolution` column rather than three: the selectors, the downsampling and the
pruning treat every level alike, and a chart asks for one level by number. Rows are written in
bulk (scheduling.bulk) and never updated.

`node` and `job` are references without a database constraint, and Django does nothing to these
rows when a node or a job is deleted: history outlives what it describes (a finished job's chart),
and deleting a job must not walk millions of samples. Pruning is what removes rows.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Resolution(models.IntegerChoices):
    """Seconds each row stands for: 0 is a sample as taken; the others are averages."""

    RAW = 0, "As sampled"
    MINUTE = 60, "1-minute averages"
    HOUR = 3600, "1-hour averages"


class GpuSample(models.Model):
    node = models.ForeignKey(
        "quotas.Node", on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    gpu = models.PositiveSmallIntegerField(help_text="The device's index on its node.")
    job = models.ForeignKey(
        "scheduling.Job",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="+",
        help_text="The job holding the GPU (the largest share of a shared one); none when idle.",
    )
    resolution = models.PositiveSmallIntegerField(choices=Resolution.choices, default=Resolution.RAW)
    at = models.DateTimeField(help_text="When sampled; for an average, the start of its minute or hour.")
    utilisation = models.FloatField(help_text="Percent of the GPU's time busy, 0 to 100.")
    memory_used_mib = models.PositiveIntegerField()
    memory_total_mib = models.PositiveIntegerField()

    class Meta:
        ordering = ["resolution", "at", "node_id", "gpu"]
        indexes = [
            # Pruning and the downsampling's watermark: one range per level.
            models.Index(fields=["resolution", "at"], name="gpusample_level_at"),
            # A job's chart: its rows at one level over a window.
            models.Index(fields=["job", "resolution", "at"], name="gpusample_job_level_at"),
            # The latest reading of each GPU (Nodes page, /metrics): raw rows only, a partial
            # index a twentieth the size of a full one (raw rows are an hour of 7 days' rows).
            models.Index(fields=["node", "gpu", "at"], condition=Q(resolution=0), name="gpusample_latest_raw"),
        ]

    def __str__(self) -> str:
        return f"node {self.node_id} GPU {self.gpu} at {self.at:%Y-%m-%d %H:%M:%S}: {self.utilisation:.0f} %"
