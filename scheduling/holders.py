"""Who holds which GPUs: running and releasing jobs' placements, by job, device and node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, TypedDict

from scheduling.models import HOLDING_STATES, Job, ReplicaPlacementRecord
from scheduling.snapshot_rows import raw_rows, stored_devices


class HeldGpus(TypedDict):
    job: str
    quota: str
    gpus: float


def jobs_holding_gpus(*, quota_ids: Iterable[int]) -> list[HeldGpus]:
    """Running (and releasing) jobs of these quotas with the GPUs they hold, newest first: the order
    in which reclaim takes them back, so a preview can name the jobs a smaller guarantee exposes."""
    rows = (
        Job.objects.filter(quota_id__in=list(quota_ids), state__in=HOLDING_STATES)
        .order_by("-submitted_at", "-id")
        .values_list("name", "quota__name", "allocated_gpus")
    )
    return [HeldGpus(job=name, quota=quota, gpus=float(gpus)) for name, quota, gpus in rows]


class GpuHolder(TypedDict):
    """One job's share of one GPU device: a whole device, or a fraction of it."""

    node_id: int
    node: str
    device: int
    job_id: int
    job: str
    job_state: str
    quota_id: int
    quota: str
    fraction: float


def gpu_holders(*, quota_ids: Iterable[int] | None = None, node_ids: Iterable[int] | None = None) -> list[GpuHolder]:
    """Who holds which GPU, one entry per (job, device), by node, device and job: every running
    or releasing job's placements (of these quotas' jobs, on these nodes, when given) in one query.

    The Nodes page draws its GPU grid from it, the Quota page's Nodes tab the GPUs of a subtree.
    A fractional replica names its one device with its fraction; a whole replica each device at 1.
    """
    placements = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
    if quota_ids is not None:
        placements = placements.filter(job__quota_id__in=list(quota_ids))
    if node_ids is not None:
        placements = placements.filter(node_id__in=list(node_ids))
    rows = placements.values_list(
        "node_id", "node__name", "devices", "fraction", "job_id", "job__name", "job__state", "job__quota_id",
        "job__quota__name",
    )  # fmt: skip
    holders = [
        GpuHolder(
            node_id=node_id,
            node=node,
            device=device,
            job_id=job_id,
            job=job,
            job_state=job_state,
            quota_id=quota_id,
            quota=quota,
            fraction=fraction if fraction < 1 else 1.0,
        )
        for node_id, node, devices, fraction, job_id, job, job_state, quota_id, quota in rows
        for device in stored_devices(devices)
    ]
    holders.sort(key=lambda holder: (holder["node_id"], holder["device"], holder["job"], holder["job_id"]))
    return holders


class HeldDevice(NamedTuple):
    """One running (or releasing) replica's devices on a node, with the job's kind (telemetry's
    synthetic curves follow the kind)."""

    job_id: int
    kind: str
    node_id: int
    devices: tuple[int, ...]
    fraction: float


def held_devices_with_kind(*, node_ids: Iterable[int]) -> list[HeldDevice]:
    """Every replica holding GPUs on these nodes, in one query."""
    wanted = list(node_ids)
    if not wanted:
        return []
    rows = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES, node_id__in=wanted)
    return [
        HeldDevice(job_id, kind, node_id, stored_devices(devices), fraction)
        for job_id, kind, node_id, devices, fraction in raw_rows(
            rows.values_list("job_id", "job__kind", "node_id", "devices", "fraction")
        )
    ]
