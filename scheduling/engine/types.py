"""The engine's interface: a frozen snapshot goes in, a frozen cycle result comes out.

Everything here is immutable so that the runtime can hand the same snapshot to a dry run and
to the real cycle, and so that the engine can never change what it was given. Only optional
fields with defaults may be added; nothing is renamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

# Queue policies (SCHEDULING.md "Words").
BEST_EFFORT: Final = "best_effort"
FIFO: Final = "fifo"

# Placement policies of a pool.
PACK: Final = "pack"
SPREAD: Final = "spread"

# Job states the engine understands.
PENDING: Final = "pending"
RUNNING: Final = "running"
RELEASING: Final = "releasing"

# Eviction rules named in Evict.rule / Shrink.rule.
CONSOLIDATION: Final = "consolidation"
RECLAIM: Final = "reclaim"
PREEMPT: Final = "preempt"
CHILD_PREEMPTION: Final = "child_preemption"
SAME_LEVEL: Final = "same_level"
SHRINK: Final = "shrink"
DRAIN: Final = "drain"  # an admin drains the node: every job on it goes, whatever its kind

# Reason codes of a pending job (SCHEDULING.md §5, docs/scheduling.md).
QUOTA_LIMIT: Final = "quota_limit"
GUARANTEED_ONLY: Final = "guaranteed_only"
NO_FIT: Final = "no_fit"
EXCEEDS_CLUSTER: Final = "exceeds_cluster"
WAITING_FOR_EVICTION: Final = "waiting_for_eviction"
QUEUE_BLOCKED: Final = "queue_blocked"
INSUFFICIENT_CAPACITY: Final = "insufficient_capacity"
UNKNOWN_QUOTA: Final = "unknown_quota"
# Kept off GPUs reserved for the gang at the head of a quota's queue (actions.reserve).
BEHIND_RESERVATION: Final = "behind_reservation"

REASON_CODES: Final = (
    QUOTA_LIMIT,
    GUARANTEED_ONLY,
    NO_FIT,
    EXCEEDS_CLUSTER,
    WAITING_FOR_EVICTION,
    QUEUE_BLOCKED,
    INSUFFICIENT_CAPACITY,
    UNKNOWN_QUOTA,
    BEHIND_RESERVATION,
)


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the pool. cpu / memory_gib of 0 mean "not tracked" (no CPU/memory fit check).

    `ready` is the node being up: a node that is not ready is outside the cluster (the runtime
    releases what ran there). `schedulable` False is a cordoned node: up, its running jobs stay,
    but nothing new is placed on it (Kubernetes' `unschedulable`). `draining` is cordoned with
    its jobs evicted, each after its grace period (rule `drain`).
    """

    name: str
    gpus: int
    cpu: float = 0
    memory_gib: float = 0
    ready: bool = True
    schedulable: bool = True
    draining: bool = False
    pool: str = ""  # its resource pool's name; one pool ("") when no node or quota names one
    # Devices that work outside the console holds (a Slurm job submitted by hand): never free
    # to the console's jobs, and not part of the capacity that fair share divides.
    held_outside: tuple[int, ...] = ()

    @property
    def placeable(self) -> bool:
        """Takes new placements: up, not cordoned, not draining."""
        return self.ready and self.schedulable and not self.draining

    @property
    def console_gpus(self) -> int:
        """The GPUs the console may use: all but those held outside it."""
        return self.gpus - len({d for d in self.held_outside if 0 <= d < self.gpus})


@dataclass(frozen=True, slots=True)
class Quota:
    """One node of the quota tree; `gpus` is the GPU guarantee."""

    name: str
    parent: str | None
    gpus: float
    cpu: float | None = None
    memory_gib: float | None = None
    limit: float | None = None  # GPU limit; None: unlimited
    cpu_limit: float | None = None  # cores; None: unlimited (managed pools only)
    memory_gib_limit: float | None = None  # GiB; None: unlimited (managed pools only)
    weight: float | None = None  # None means "equal to gpus"
    rank: int = 0
    child_preemption: bool = False
    same_level_preemption: bool = False
    queue_policy: str = BEST_EFFORT
    min_runtime_seconds: float | None = None  # None inherits from the parent (root: 0)
    created_order: int = 0
    pool: str = ""  # a root's pool; a child's is its parent's (the snapshot builder gives it)


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Where one replica runs: whole devices, or one device and the fraction used on it."""

    node: str
    devices: tuple[int, ...]
    fraction: float = 1.0


@dataclass(frozen=True, slots=True)
class Job:
    """A job; `gpus`, `cpu` and `memory_gib` are per replica."""

    id: str
    quota: str
    gpus: float
    replicas: int = 1
    min_replicas: int | None = None
    priority: int = 5
    preemptible: bool = True
    cpu: float = 0
    memory_gib: float = 0
    submitted_at: float = 0
    state: str = PENDING  # "pending" | "running" | "releasing"
    started_at: float | None = None
    placements: tuple[ReplicaPlacement, ...] = ()
    grace_seconds: float = 0
    workspace: str = ""
    beneficiary: str | None = None  # for a releasing job: the job it is released for
    evicted_at: float | None = None  # for a releasing job: when its grace period began
    # Expected seconds of running once started (a time limit, or the simulated executor's
    # duration); None: unknown. Reservations estimate when GPUs free from it (actions.reserve).
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...]
    quotas: tuple[Quota, ...]
    jobs: tuple[Job, ...]
    now: float
    placement: str = PACK
    # (pool, placement) per pool; a pool not listed places by `placement` (SCHEDULING.md "Pool").
    pool_placements: tuple[tuple[str, str], ...] = ()
    # The part of the per-cycle bounds (engine.bounds) this snapshot may spend: below 1 for one
    # pool of several (engine.pools), so that a cycle over many pools stays as fast as one.
    bound_share: float = 1.0


@dataclass(frozen=True, slots=True)
class Admit:
    """Start the job with these replicas (an elastic job: between min_replicas and replicas)."""

    job_id: str
    placements: tuple[ReplicaPlacement, ...]
    kind: Literal["admit"] = "admit"


@dataclass(frozen=True, slots=True)
class Evict:
    """The whole job goes back to the queue (after its grace period).

    For consolidation the same result holds an Admit of the job right after (restart elsewhere).
    """

    job_id: str
    rule: str
    beneficiary: str | None
    reason: str
    kind: Literal["evict"] = "evict"


@dataclass(frozen=True, slots=True)
class Shrink:
    """An elastic running job loses these replicas; the job keeps running."""

    job_id: str
    remove: tuple[ReplicaPlacement, ...]
    rule: str
    beneficiary: str | None
    reason: str
    kind: Literal["shrink"] = "shrink"


@dataclass(frozen=True, slots=True)
class Grow:
    """An elastic running job gains replicas on idle capacity."""

    job_id: str
    add: tuple[ReplicaPlacement, ...]
    kind: Literal["grow"] = "grow"


Decision: TypeAlias = Admit | Evict | Shrink | Grow


# Managed resources besides GPUs (SCHEDULING.md "Managed resources"): a pool manages one when
# any of its root quotas sets its guarantee (Quota.cpu / Quota.memory_gib not None).
CPU: Final = "cpu"
MEMORY: Final = "memory_gib"
MANAGED_RESOURCES: Final = (CPU, MEMORY)


@dataclass(frozen=True, slots=True)
class ResourceStatus:
    """One managed resource of a quota (cores or GiB), the GPU figures' twin."""

    fair_share: float
    allocated: float
    guaranteed: float
    limit: float | None = None
    allocated_self: float = 0.0  # the quota's own jobs, as QuotaStatus.allocated_self


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """GPU figures of one quota; `allocated` is the subtree, `allocated_self` its own jobs.

    Releasing jobs still hold their GPUs and count as allocated; running / pending count jobs
    of the subtree.
    """

    fair_share: float
    allocated: float
    allocated_self: float
    saturation: float
    running: int
    pending: int
    guaranteed: float
    # Managed resources of the quota's pool other than GPUs, keyed CPU / MEMORY; empty when the
    # pool manages GPUs only.
    resources: dict[str, ResourceStatus] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PendingReason:
    code: str
    message: str
    position: int  # 1-based, in its quota's queue


# A frozen dataclass's __init__ sets each field through object.__setattr__ (about 1.4 µs for
# three fields, 2.8 µs for eight), and a cycle at S4 explains 100,000 pending jobs and reports
# 11,110 quotas: the engine builds those two through the slots' descriptors instead, the same
# objects at a quarter of the cost.
_new = object.__new__
_set_code = vars(PendingReason)["code"].__set__
_set_message = vars(PendingReason)["message"].__set__
_set_position = vars(PendingReason)["position"].__set__
_set_fair_share = vars(QuotaStatus)["fair_share"].__set__
_set_allocated = vars(QuotaStatus)["allocated"].__set__
_set_allocated_self = vars(QuotaStatus)["allocated_self"].__set__
_set_saturation = vars(QuotaStatus)["saturation"].__set__
_set_running = vars(QuotaStatus)["running"].__set__
_set_pending = vars(QuotaStatus)["pending"].__set__
_set_guaranteed = vars(QuotaStatus)["guaranteed"].__set__
_set_resources = vars(QuotaStatus)["resources"].__set__


def new_pending_reason(code: str, message: str, position: int) -> PendingReason:
    """`PendingReason(code, message, position)`, built faster (see above)."""
    reason = _new(PendingReason)
    _set_code(reason, code)
    _set_message(reason, message)
    _set_position(reason, position)
    return reason


def new_quota_status(
    fair_share: float,
    allocated: float,
    allocated_self: float,
    saturation: float,
    running: int,
    pending: int,
    guaranteed: float,
    resources: dict[str, ResourceStatus],
) -> QuotaStatus:
    """`QuotaStatus(...)` with every field given, built faster (see above)."""
    status = _new(QuotaStatus)
    _set_fair_share(status, fair_share)
    _set_allocated(status, allocated)
    _set_allocated_self(status, allocated_self)
    _set_saturation(status, saturation)
    _set_running(status, running)
    _set_pending(status, pending)
    _set_guaranteed(status, guaranteed)
    _set_resources(status, resources)
    return status


@dataclass(frozen=True, slots=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    quotas: dict[str, QuotaStatus] = field(default_factory=dict)
    pending: dict[str, PendingReason] = field(default_factory=dict)
