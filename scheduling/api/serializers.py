"""Shapes of the jobs and scheduler API (API.md); rules live in scheduling.services."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas import bounds
from quotas.api.serializers import text, within
from scheduling import job_environment, mentions, selectors
from scheduling.models import Job, JobKind
from utilities.json_types import JsonTypedMixin


class JobListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """A page of jobs: the jobs their reasons name are read once for the page (two queries)."""

    def to_representation(self, data: Any) -> list[Any]:
        jobs = list(data.all() if hasattr(data, "all") else data)
        self.context["reasons"] = mentions.reasons_as_seen(_reader(self.context), jobs)
        return super().to_representation(jobs)


def _reader(context: dict[str, Any]) -> Any:
    """Who reads the answer; without a request, nobody who may see another job (anonymous)."""
    request = context.get("request")
    return getattr(request, "user", None) or AnonymousUser()


class JobSerializer(JsonTypedMixin, serializers.ModelSerializer[Job]):
    """A job as API.md lists it; everything the scheduler owns is read-only."""

    workspace: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    quota: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    owner: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="None for a scenario's jobs."
    )
    environment = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Seen by everyone who may see the job: not a place for secrets.",
    )
    nodes = serializers.SerializerMethodField()
    placements = serializers.SerializerMethodField()
    slurm_job_ids = serializers.SerializerMethodField(
        help_text="Slurm's ids of the job's replicas as squeue shows them (`812_3`: task 3 of job array "
        "812), oldest first (an earlier run's included); empty for jobs of other executors."
    )
    reason = serializers.SerializerMethodField()
    # Kept with the reason, in its own table (scheduling.pending_reasons): the job's `shown_position`.
    position = serializers.IntegerField(source="shown_position", read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "workspace",
            "quota",
            "kind",
            "gpus",
            "replicas",
            "min_replicas",
            "priority",
            "preemptible",
            "cpu",
            "memory_gib",
            "command",
            "environment",
            "image",
            "duration",
            "grace_seconds",
            "requeue",
            "owner",
            "state",
            "allocated_gpus",
            "running_replicas",
            "nodes",
            "placements",
            "slurm_job_ids",
            "preemptions",
            "reason",
            "position",
            "submitted_at",
            "started_at",
            "finished_at",
            "release_at",
        ]
        read_only_fields = fields
        list_serializer_class = JobListSerializer

    def get_nodes(self, job: Job) -> list[str]:
        return sorted({placement.node.name for placement in job.placements.all()})

    def get_placements(self, job: Job) -> list[dict[str, Any]]:
        return [{"node": p.node.name, "devices": p.devices, "fraction": p.fraction} for p in job.placements.all()]

    def get_slurm_job_ids(self, job: Job) -> list[str]:
        return selectors.slurm_job_ids(job)

    def get_reason(self, job: Job) -> dict[str, str] | None:
        code, message, _position = job.shown_reason
        if not code:
            return None
        # The reason may name the job this one waits for or behind: as the reader may see it.
        shown: dict[int, str] | None = self.context.get("reasons")
        if shown is None or job.pk not in shown:
            shown = mentions.reasons_as_seen(_reader(self.context), [job])
        return {"code": code, "message": shown.get(job.pk, message)}


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": bounds.JOB_ENV_VARIABLES_MAX,
        "additionalProperties": {"type": "string", "maxLength": bounds.JOB_ENV_VALUE_MAX_LENGTH},
    }
)
class EnvironmentField(serializers.DictField):
    """NAME: value pairs the agent sets in each replica's process; the service refuses the names
    the agent sets itself (scheduling.job_environment), with the same sentences."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(allow_blank=True, trim_whitespace=False), **kwargs)

    def to_internal_value(self, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            # Before the child fields: CharField would turn 8 into "8" and a 10,000-entry object
            # would cost as many fields; the schema says each value is a string.
            errors = job_environment.environment_errors(value)
            if errors:
                raise serializers.ValidationError(errors)
        environment: dict[str, str] = super().to_internal_value(value)
        return environment


class JobSubmitSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    """What a submitter may set; workspace and quota by name. Other fields sent are ignored."""

    name = serializers.CharField(**text("name", bounds.JOB_NAME_MAX_LENGTH))
    workspace = serializers.CharField(**text("workspace", bounds.NAME_MAX_LENGTH))
    quota = serializers.CharField(**text("quota", bounds.NAME_MAX_LENGTH))
    kind = serializers.ChoiceField(choices=JobKind.choices)
    gpus = serializers.FloatField(**within("gpus", bounds.JOB_GPUS_MAX, least=10**-bounds.JOB_GPU_DECIMALS))
    replicas = serializers.IntegerField(default=1, **within("replicas", bounds.JOB_REPLICAS_MAX, least=1))
    min_replicas = serializers.IntegerField(
        required=False, allow_null=True, default=None, **within("min_replicas", bounds.JOB_REPLICAS_MAX, least=1)
    )
    priority = serializers.IntegerField(required=False, allow_null=True, default=None, **within("priority", 9, least=1))
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None)
    cpu = serializers.FloatField(default=0.0, **within("cpu", bounds.JOB_CPU_MAX))
    memory_gib = serializers.FloatField(default=0.0, **within("memory_gib", bounds.JOB_MEMORY_GIB_MAX))
    command = serializers.CharField(
        required=False, allow_blank=True, default="", **text("command", bounds.COMMAND_MAX_LENGTH, blank=True)
    )
    environment = EnvironmentField(
        required=False,
        default=dict,
        # OpenAPI 3.0 has no propertyNames: the names' rule is said in words.
        help_text=f"Set in each replica's process, beneath the agent's own variables. Names match "
        f"{job_environment.NAME_PATTERN.pattern}; CUDA_VISIBLE_DEVICES, GPU_QUOTA_* and GQC_* are the agent's.",
    )
    image = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="For executors that run containers; the process agent runs the command on the host.",
        **text("image", bounds.JOB_IMAGE_MAX_LENGTH, blank=True),
    )
    duration = serializers.FloatField(
        required=False, allow_null=True, default=None, **within("duration", bounds.JOB_DURATION_MAX)
    )
    grace_seconds = serializers.FloatField(default=0.0, **within("grace_seconds", bounds.GRACE_SECONDS_MAX))
    requeue = serializers.BooleanField(default=True)
    dry_run = serializers.BooleanField(default=False)


class JobDryRunSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    dry_run = serializers.BooleanField(default=False)


class JobMentionSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    """Another job as the reader may learn of it (scheduling.mentions): `job` and `id` are null
    where the reader may not see it; quota, workspace and GPUs are always there."""

    job = serializers.CharField(allow_null=True)
    id = serializers.IntegerField(allow_null=True)
    quota = serializers.CharField()
    workspace = serializers.CharField()
    gpus = serializers.FloatField()
    visible = serializers.BooleanField()
    description = serializers.CharField(help_text='"8 GPUs of Quota1.1 (workspace-b)"')


class JobEventSerializer(JsonTypedMixin, serializers.Serializer[Any]):
    """One event of a job's history (scheduling.mentions.EventSeen), as its reader may read it."""

    at = serializers.DateTimeField()
    kind = serializers.CharField()
    rule = serializers.CharField()
    beneficiary = serializers.CharField(
        source="beneficiary_name",
        allow_null=True,
        help_text="The job an eviction made room for, by name; null where there is none or where you may not "
        "see it (beneficiary_job then says whose it is).",
    )
    beneficiary_job = JobMentionSerializer(allow_null=True)
    message = serializers.CharField()


class JobLogSerializer(serializers.Serializer[Any]):
    lines = serializers.ListField(child=serializers.CharField(), help_text="Oldest first; the last lines kept.")
    truncated = serializers.BooleanField(help_text="Earlier lines were dropped (the console keeps a bounded tail).")


class SubmitVictimSerializer(JobMentionSerializer):
    """A job the dry run would evict or shrink; a foreign one by quota, workspace and GPUs only."""

    rule = serializers.CharField()
    reason = serializers.CharField()


class SubmitPreviewSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    would_admit = serializers.BooleanField()
    reason = serializers.DictField(allow_null=True)
    placements = serializers.ListField(child=serializers.DictField())
    evict = SubmitVictimSerializer(many=True)


class CycleOutcomeSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    ran = serializers.BooleanField()
    committed = serializers.BooleanField()
    trigger = serializers.CharField()
    token = serializers.IntegerField(allow_null=True)
    started_at = serializers.CharField(allow_null=True)
    duration_ms = serializers.FloatField()
    admitted = serializers.IntegerField()
    evicted = serializers.IntegerField()
    pending = serializers.IntegerField()
    skipped = serializers.IntegerField()
    executor_changes = serializers.IntegerField()
    refused = serializers.CharField(allow_blank=True)
    decisions = serializers.ListField(child=serializers.DictField())
    queued = serializers.BooleanField(
        help_text="No cycle finished within the wait (a second): one is queued for the worker; "
        "GET scheduler/status/ shows it when done."
    )


class SchedulerStatusSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    last_cycle_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.FloatField(allow_null=True)
    trigger = serializers.CharField(allow_null=True)
    lock_token = serializers.IntegerField(allow_null=True)
    admitted = serializers.IntegerField(allow_null=True)
    evicted = serializers.IntegerField(allow_null=True)
    pending = serializers.IntegerField(allow_null=True)
    decisions = serializers.ListField(child=serializers.DictField(), allow_null=True)
    lock_holder = serializers.CharField(allow_null=True)
    lock_backend = serializers.CharField()
    executor = serializers.CharField()
    trigger_mode = serializers.CharField()
