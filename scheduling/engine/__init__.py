"""The scheduling engine: a pure function from a frozen snapshot to decisions with reasons.

Imports nothing of Django so that the runtime, `simulate` and the tests share one core.
"""

from scheduling.engine.cycle import schedule
from scheduling.engine.fairshare import fair_shares
from scheduling.engine.types import (
    REASON_CODES,
    Admit,
    CycleResult,
    Decision,
    Evict,
    Grow,
    Job,
    Node,
    PendingReason,
    Quota,
    QuotaStatus,
    ReplicaPlacement,
    ResourceStatus,
    Shrink,
    Snapshot,
)

__all__ = [
    "REASON_CODES",
    "Admit",
    "CycleResult",
    "Decision",
    "Evict",
    "Grow",
    "Job",
    "Node",
    "PendingReason",
    "Quota",
    "QuotaStatus",
    "ReplicaPlacement",
    "ResourceStatus",
    "Shrink",
    "Snapshot",
    "fair_shares",
    "schedule",
]
