"""Resource pools, nodes and their GPU devices, the quota tree, and the audit log.

The rules that span rows (children's guarantees within the parent's, names unique, no
cycles) are enforced in `quotas.services`; the models hold the shape and per-row checks.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class PlacementPolicy(models.TextChoices):
    PACK = "pack", "Pack (fullest node that fits)"
    SPREAD = "spread", "Spread (emptiest node that fits)"


class ResourcePool(models.Model):
    """A set of nodes (usually of one GPU model) whose capacity one quota tree divides.

    Every scheduling rule holds inside one pool (SCHEDULING.md "Pool"): a job runs only on its
    quota's pool's nodes, and a pool's idle GPUs are lent only to that pool's quotas. The pool
    named `default` is made when first needed and takes nodes and root quotas that name none.
    """

    DEFAULT_NAME = "default"

    name = models.CharField(max_length=100, unique=True)
    placement = models.CharField(max_length=10, choices=PlacementPolicy.choices, default=PlacementPolicy.PACK)
    description = models.CharField(max_length=2000, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class NodeState(models.TextChoices):
    """AGENT.md's node states: only a ready node takes new placements.

    `not_ready` is a node that is down or whose agent stopped beating; `cordoned` keeps its jobs
    but takes no new ones; `draining` is cordoned with its jobs being evicted.
    """

    READY = "ready", "Ready"
    NOT_READY = "not_ready", "Not ready"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"


class NodeExecutor(models.TextChoices):
    """Who carries out the scheduler's decisions on a node (simulated and real nodes may mix)."""

    SIMULATED = "simulated", "Simulated"
    AGENT = "agent", "Node agent"
    SLURM = "slurm", "Slurm"


class Node(models.Model):
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="nodes")
    name = models.CharField(max_length=100, unique=True)
    gpus = models.PositiveIntegerField()
    cpu = models.FloatField(default=0)
    memory_gib = models.FloatField(default=0)
    gpu_model = models.CharField(max_length=100, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=NodeState.choices, default=NodeState.READY)
    executor = models.CharField(max_length=10, choices=NodeExecutor.choices, default=NodeExecutor.SIMULATED)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(cpu__gte=0) & Q(memory_gib__gte=0), name="node_amounts_not_negative"),
        ]

    def __str__(self) -> str:
        return self.name


class GpuDevice(models.Model):
    """One physical GPU of a node; placements and live usage refer to it by (node, index)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField()
    model = models.CharField(max_length=100, blank=True, default="")

    class Meta:
        ordering = ["node_id", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="device_index_unique_per_node")]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class QueuePolicy(models.TextChoices):
    BEST_EFFORT = "best_effort", "Best effort (skip a job that does not fit)"
    FIFO = "fifo", "FIFO (a job that does not fit blocks the ones behind it)"


class Quota(models.Model):
    """A node of the quota tree; `gpus`, `cpu`, `memory_gib` are the guarantees, `limit`,
    `cpu_limit`, `memory_gib_limit` the ceilings."""

    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="quotas")
    name = models.CharField(max_length=100, unique=True)
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children")
    gpus = models.FloatField(default=0)
    cpu = models.FloatField(null=True, blank=True)
    memory_gib = models.FloatField(null=True, blank=True)
    limit = models.FloatField(null=True, blank=True, help_text="GPU limit; none means no limit.")
    # Limits of the other managed resources (SCHEDULING.md "Managed resources"): none means no limit.
    cpu_limit = models.FloatField(null=True, blank=True, help_text="CPU limit in cores; none means no limit.")
    memory_gib_limit = models.FloatField(null=True, blank=True, help_text="Memory limit in GiB; none means no limit.")
    weight = models.FloatField(null=True, blank=True, help_text="Over-quota weight; none follows gpus.")
    rank = models.IntegerField(default=0)
    child_preemption = models.BooleanField(default=False)
    same_level_preemption = models.BooleanField(default=False)
    queue_policy = models.CharField(max_length=20, choices=QueuePolicy.choices, default=QueuePolicy.BEST_EFFORT)
    min_runtime_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="None inherits the parent's.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=0), name="quota_gpus_not_negative"),
            models.CheckConstraint(condition=Q(cpu__isnull=True) | Q(cpu__gte=0), name="quota_cpu_not_negative"),
            models.CheckConstraint(
                condition=Q(memory_gib__isnull=True) | Q(memory_gib__gte=0), name="quota_memory_not_negative"
            ),
            models.CheckConstraint(condition=Q(limit__isnull=True) | Q(limit__gte=0), name="quota_limit_not_negative"),
            models.CheckConstraint(
                condition=Q(cpu_limit__isnull=True) | Q(cpu_limit__gte=0), name="quota_cpu_limit_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(memory_gib_limit__isnull=True) | Q(memory_gib_limit__gte=0),
                name="quota_memory_limit_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(weight__isnull=True) | Q(weight__gte=0), name="quota_weight_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def effective_weight(self) -> float:
        """Idle capacity is lent in proportion to quota unless a weight is set."""
        return self.gpus if self.weight is None else self.weight


class AuditRecord(models.Model):
    """Who changed what, when, with the state before and after; every app writes here."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    action = models.CharField(max_length=100)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=100, blank=True, default="")
    object_repr = models.CharField(max_length=200, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.object_type} {self.object_repr}"


class NodeAgent(models.Model):
    """The agent of one node (AGENT.md): its token, stored hashed, and what it last registered.

    One row per node: issuing a token overwrites the hash, so the old token stops working at once.
    `lost_at` marks a node that the lost-node check made not ready, so that the agent's next beat
    makes it ready again without undoing a `down` an admin asked for.
    """

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="agent")
    token_hash = models.CharField(max_length=64, unique=True)
    token_prefix = models.CharField(max_length=12, blank=True, default="")
    token_issued_at = models.DateTimeField()
    registered_at = models.DateTimeField(null=True, blank=True)
    registered_devices = models.JSONField(default=list, blank=True)
    # As the kubelet's in `kubectl get nodes`: which agent runs where, while a fleet is upgraded.
    version = models.CharField(
        max_length=40, blank=True, default="", help_text="The agent's, at its last registration."
    )
    lost_at = models.DateTimeField(null=True, blank=True)
    # The last start its agent did not take up in time (AGENT_START_BEATS heartbeats), and why:
    # the Nodes page warns until the agent takes up a start again.
    start_missed_at = models.DateTimeField(null=True, blank=True)
    start_missed = models.CharField(max_length=300, blank=True, default="")

    def __str__(self) -> str:
        return f"agent of {self.node_id}"


class Installation(models.Model):
    """This console's identity, made once (at its first use) and kept: one row, never changed.

    A database rebuilt or another console numbers its replicas from 1 again, so an agent's memory of
    replica ids (its state directory), or a Slurm job's name, means something only together with the
    identity of the console that gave them out (docs/agent.md, "The state directory")."""

    identity = models.UUIDField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"console {self.identity}"
