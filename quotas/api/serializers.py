"""Shapes of the quotas API; the rules themselves live in `quotas.services`."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from quotas import bounds, selectors
from quotas.hooks import QuotaStatus
from quotas.models import AuditRecord, Node, Quota, ResourcePool
from utilities.json_types import JsonTypedMixin


def within(field: str, most: float, *, least: float | None = 0) -> dict[str, Any]:
    """Keyword arguments for a number field that publish a bound (quotas.bounds) in the schema
    and refuse beyond it with a sentence naming the field and the bound."""
    # DRF formats {max_value} itself; Django's validator then fills %(value)s with what was sent.
    limits: dict[str, Any] = {
        "max_value": most,
        "error_messages": {"max_value": f"{field} must be at most {bounds.readable(most)}, got %(value)s."},
    }
    if least is not None:
        limits["min_value"] = least
        limits["error_messages"]["min_value"] = f"{field} must be at least {bounds.readable(least)}, got %(value)s."
    return limits


def text(field: str, most: int, *, blank: bool = False) -> dict[str, Any]:
    """Keyword arguments for a text field: at most `most` characters, and not blank unless allowed
    (the schema then says `minLength: 1`, which the services enforce anyway)."""
    limits: dict[str, Any] = {
        "max_length": most,
        "error_messages": {"max_length": f"{field} has at most {most:,} characters."},
    }
    if not blank:
        limits["min_length"] = 1
        limits["error_messages"]["min_length"] = f"{field} must not be empty."
    return limits


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": bounds.NAME_MAX_LENGTH})
class QuotaNameField(serializers.SlugRelatedField[Quota]):
    """A quota referred to by its unique name, looked up among the quotas the user may see."""

    default_error_messages = {
        "does_not_exist": "There is no quota named {value}.",
        "invalid": "A quota is named by a string.",
        "blank": "A quota name must not be empty; send null for none.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="name", **kwargs)

    def run_validation(self, data: Any = serializers.empty) -> Any:
        # DRF turns "" into null for related fields, which would make `parent: ""` a root quota.
        if data == "":
            self.fail("blank")
        return super().run_validation(data)

    def get_queryset(self) -> QuerySet[Quota]:
        request = self.context.get("request")
        return selectors.visible_quotas(getattr(request, "user", None))


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": bounds.NAME_MAX_LENGTH})
class PoolNameField(serializers.SlugRelatedField[ResourcePool]):
    """A resource pool referred to by its unique name."""

    default_error_messages = {
        "does_not_exist": "There is no pool named {value}.",
        "invalid": "A pool is named by a string.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="name", queryset=ResourcePool.objects.all(), **kwargs)


class PoolSerializer(JsonTypedMixin, serializers.ModelSerializer[ResourcePool]):
    class Meta:
        model = ResourcePool
        fields = ["id", "name", "placement", "description"]
        read_only_fields = ["id"]
        # Uniqueness is a rule of the service, which names the clash.
        extra_kwargs: dict[str, dict[str, Any]] = {
            "name": {"validators": [], **text("name", bounds.NAME_MAX_LENGTH)},
            "description": text("description", bounds.DESCRIPTION_MAX_LENGTH, blank=True),
        }


class ResourceStatusSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    """One managed resource besides GPUs (cores or GiB), the GPU figures' twin."""

    fair_share = serializers.FloatField()
    allocated = serializers.FloatField()
    guaranteed = serializers.FloatField()
    limit = serializers.FloatField(allow_null=True)


class QuotaStatusSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    fair_share = serializers.FloatField()
    allocated = serializers.FloatField()
    allocated_self = serializers.FloatField()
    running = serializers.IntegerField()
    pending = serializers.IntegerField()
    # Present only where the quota's pool manages the resource (a root quota of it sets it).
    cpu = ResourceStatusSerializer(required=False, help_text="CPU cores; only where the pool manages CPU.")
    memory_gib = ResourceStatusSerializer(required=False, help_text="GiB; only where the pool manages memory.")


class QuotaListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """Asks the scheduler for the status of the whole page at once, so queries stay constant."""

    def to_representation(self, data: Any) -> list[Any]:
        quotas = list(data.all() if isinstance(data, QuerySet) else data)
        self.context["statuses"] = selectors.quota_statuses(quotas)
        return super().to_representation(quotas)


class QuotaSerializer(JsonTypedMixin, serializers.ModelSerializer[Quota]):
    parent = QuotaNameField(allow_null=True, required=False)  # type: ignore[assignment]
    pool = PoolNameField(
        required=False,
        help_text="A root's pool (omitted: the pool named default); a child has its parent's.",
    )
    effective_weight = serializers.FloatField(read_only=True)
    status = serializers.SerializerMethodField()
    dry_run = serializers.BooleanField(write_only=True, required=False, default=False)

    class Meta:
        model = Quota
        list_serializer_class = QuotaListSerializer
        fields = [
            "id",
            "name",
            "pool",
            "parent",
            "gpus",
            "cpu",
            "memory_gib",
            "limit",
            "cpu_limit",
            "memory_gib_limit",
            "weight",
            "effective_weight",
            "rank",
            "child_preemption",
            "same_level_preemption",
            "queue_policy",
            "min_runtime_seconds",
            "status",
            "dry_run",
        ]
        read_only_fields = ["id"]
        # Uniqueness is a rule of the service, which names the clash; the API does not pre-empt it.
        extra_kwargs: dict[str, dict[str, Any]] = {
            "name": {"validators": [], **text("name", bounds.NAME_MAX_LENGTH)},
            "gpus": within("gpus", bounds.QUOTA_GPUS_MAX),
            "cpu": within("cpu", bounds.QUOTA_CPU_MAX),
            "memory_gib": within("memory_gib", bounds.QUOTA_MEMORY_GIB_MAX),
            "limit": within("limit", bounds.QUOTA_GPUS_MAX),
            "cpu_limit": within("cpu_limit", bounds.QUOTA_CPU_MAX),
            "memory_gib_limit": within("memory_gib_limit", bounds.QUOTA_MEMORY_GIB_MAX),
            "weight": within("weight", bounds.QUOTA_WEIGHT_MAX),
            "rank": within("rank", bounds.QUOTA_RANK_MAX, least=-bounds.QUOTA_RANK_MAX),
            "min_runtime_seconds": within("min_runtime_seconds", bounds.MIN_RUNTIME_SECONDS_MAX),
        }

    def to_representation(self, quota: Quota) -> dict[str, Any]:
        """Plain attribute reads: DRF's per-field dispatch cost ~0.2 ms a row, most of a 1,000-row list."""
        parent_name = getattr(quota, "parent_name", None)
        if parent_name is None and quota.parent_id is not None:
            parent_name = quota.parent.name  # type: ignore[union-attr]
        pool_name = getattr(quota, "pool_name", None)
        if pool_name is None:
            pool_name = quota.pool.name
        return {
            "id": quota.pk,
            "name": quota.name,
            "pool": pool_name,
            "parent": parent_name,
            "gpus": quota.gpus,
            "cpu": quota.cpu,
            "memory_gib": quota.memory_gib,
            "limit": quota.limit,
            "cpu_limit": quota.cpu_limit,
            "memory_gib_limit": quota.memory_gib_limit,
            "weight": quota.weight,
            "effective_weight": quota.effective_weight,
            "rank": quota.rank,
            "child_preemption": quota.child_preemption,
            "same_level_preemption": quota.same_level_preemption,
            "queue_policy": quota.queue_policy,
            "min_runtime_seconds": quota.min_runtime_seconds,
            "status": self.get_status(quota),
        }

    def get_status(self, quota: Quota) -> QuotaStatus:
        statuses: dict[int, QuotaStatus] | None = self.context.get("statuses")
        if statuses is None or quota.pk not in statuses:
            statuses = selectors.quota_statuses([quota])
        return statuses[quota.pk]


class ScaleSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    gpus = serializers.FloatField(required=False, **within("gpus", bounds.QUOTA_GPUS_MAX))
    cpu = serializers.FloatField(required=False, **within("cpu", bounds.QUOTA_CPU_MAX))
    memory_gib = serializers.FloatField(required=False, **within("memory_gib", bounds.QUOTA_MEMORY_GIB_MAX))
    dry_run = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not any(field in attrs for field in ("gpus", "cpu", "memory_gib")):
            raise serializers.ValidationError({"gpus": "Name at least one of gpus, cpu, memory_gib to scale."})
        return attrs


class TransferSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    """`from` is a Python keyword, so the fields are built here rather than declared."""

    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]
        return {
            "from": QuotaNameField(),
            "to": QuotaNameField(),
            "gpus": serializers.FloatField(required=False, default=0, **within("gpus", bounds.QUOTA_GPUS_MAX)),
            "cpu": serializers.FloatField(required=False, default=0, **within("cpu", bounds.QUOTA_CPU_MAX)),
            "memory_gib": serializers.FloatField(
                required=False, default=0, **within("memory_gib", bounds.QUOTA_MEMORY_GIB_MAX)
            ),
            "dry_run": serializers.BooleanField(required=False, default=False),
        }


class TransferResultSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    def get_fields(self) -> dict[str, serializers.Field]:  # type: ignore[type-arg]
        return {"from": QuotaSerializer(read_only=True), "to": QuotaSerializer(read_only=True)}


class DryRunPreviewSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    # Each dry run fills what it can say: a job's cancel has no tree, a node's no shares.
    admit = serializers.ListField(child=serializers.DictField(), required=False)
    evict = serializers.ListField(child=serializers.DictField(), required=False)
    tree = serializers.ListField(child=serializers.DictField(), required=False)
    shares = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="Fair share and allocated GPUs per quota after the change.",
    )


class DryRunResultSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    """Documents the answer of a `dry_run: true` write."""

    valid = serializers.BooleanField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))  # type: ignore[assignment]
    preview = DryRunPreviewSerializer(allow_null=True)


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": bounds.NODE_LABELS_MAX,
        "additionalProperties": {"type": "string", "maxLength": bounds.LABEL_VALUE_MAX_LENGTH},
    }
)
class LabelsField(serializers.DictField):
    """A node's labels: a small mapping of names to text (the service checks the same sizes)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=serializers.CharField(allow_blank=True, **text("a label", bounds.LABEL_VALUE_MAX_LENGTH, blank=True)),
            **kwargs,
        )

    def to_internal_value(self, value: Any) -> dict[str, Any]:
        if isinstance(value, dict) and len(value) > bounds.NODE_LABELS_MAX:
            raise serializers.ValidationError(
                f"labels hold at most {bounds.NODE_LABELS_MAX} entries, got {len(value)}."
            )
        if isinstance(value, dict):
            # CharField would turn 0 into "0"; the schema says a label's value is a string.
            not_text = [key for key, label in value.items() if not isinstance(label, str)]
            if not_text:
                raise serializers.ValidationError(f"label {str(not_text[0])[:40]!r} must be a string.")
        labels: dict[str, Any] = super().to_internal_value(value)
        too_long = [key for key in labels if len(key) > bounds.LABEL_KEY_MAX_LENGTH]
        if too_long:
            raise serializers.ValidationError(
                f"a label name has at most {bounds.LABEL_KEY_MAX_LENGTH} characters; "
                f"{too_long[0][:20]}… has {len(too_long[0])}."
            )
        return labels


class NodeSerializer(JsonTypedMixin, serializers.ModelSerializer[Node]):
    labels = LabelsField(required=False)
    pool = PoolNameField(
        required=False,
        help_text="The pool it belongs to (omitted: the pool named default). A change moves the node, "
        "refused while jobs run there.",
    )
    dry_run = serializers.BooleanField(write_only=True, required=False, default=False)
    agent_version = serializers.SerializerMethodField(
        help_text="The version its node agent gave at its last registration; empty for none."
    )

    def get_agent_version(self, node: Node) -> str:
        agent = getattr(node, "agent", None)  # the reverse one-to-one raises when there is none
        return agent.version if agent is not None else ""

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "pool",
            "gpus",
            "cpu",
            "memory_gib",
            "gpu_model",
            "labels",
            "state",
            "executor",
            "last_heartbeat",
            "agent_version",
            "dry_run",
        ]
        read_only_fields = ["id", "last_heartbeat"]
        extra_kwargs: dict[str, dict[str, Any]] = {
            "name": {"validators": [], **text("name", bounds.NAME_MAX_LENGTH)},
            "gpus": within("gpus", bounds.NODE_GPUS_MAX),
            "cpu": within("cpu", bounds.NODE_CPU_MAX),
            "memory_gib": within("memory_gib", bounds.NODE_MEMORY_GIB_MAX),
            "gpu_model": text("gpu_model", bounds.GPU_MODEL_MAX_LENGTH, blank=True),
        }


class NodeTokenSerializer(serializers.Serializer[dict[str, Any]]):
    token = serializers.CharField(
        help_text="Shown once: the console keeps only its hash. Send it as `Authorization: Node <token>`."
    )


class DryRunFlagSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    dry_run = serializers.BooleanField(required=False, default=False)


class AuditRecordSerializer(JsonTypedMixin, serializers.ModelSerializer[AuditRecord]):
    actor: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="None: the system (scenarios, the scheduler)."
    )
    object = serializers.CharField(source="object_repr", read_only=True)

    class Meta:
        model = AuditRecord
        fields = ["at", "actor", "action", "object_type", "object", "before", "after"]
        read_only_fields = fields
