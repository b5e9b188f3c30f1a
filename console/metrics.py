"""`/metrics`: Prometheus text with Kueue-shaped names (docs/live.md), read from the database at
scrape time by a custom collector (scheduling.selectors.metrics_figures, constant queries), so
every web process answers the same figures and nothing is kept in memory between scrapes.

Kueue's names, with `gqc_` for `kueue_` and `cluster_queue` naming the quota:

- `gqc_pending_workloads{cluster_queue}`, `gqc_admitted_active_workloads{cluster_queue}`;
- `gqc_cluster_queue_nominal_quota`, `…_fair_share`, `…_resource_usage`, `…_borrowing`
  (`{cluster_queue, resource}`; usage counts the quota's subtree). `resource` is Kubernetes'
  resource name, as Kueue labels it: `nvidia.com/gpu` in GPUs for every quota, and, for the
  quotas of pools that manage them (issue 24), `cpu` in cores and `memory` in bytes (Kueue's
  unit for memory; the console's GiB × 2^30). The GPU series are unchanged;
- `gqc_preempted_workloads_total{cluster_queue, reason}` (reason: the engine's rule);
- `gqc_cycle_duration_seconds` and `gqc_admission_wait_time_seconds`, histograms.

DCGM-shaped per-GPU gauges from each GPU's latest telemetry sample (telemetry.selectors, one
query): `DCGM_FI_DEV_GPU_UTIL` (%) and `DCGM_FI_DEV_FB_USED` (MiB), labelled `node`, `gpu`,
`job_id` and `job_name` (empty when idle). Not `job`: Prometheus gives every series its scrape
target's `job` label, and a metric's own would be renamed `exported_job`.

Access: with METRICS_TOKEN set, `Authorization: Bearer <token>`; unset, loopback clients only.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterator
from typing import cast

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from quotas.hooks import ResourceFigures
from scheduling import selectors
from scheduling.clock import get_clock
from scheduling.models import JobState
from telemetry import selectors as telemetry_selectors

GPU = "nvidia.com/gpu"
# The managed resources besides GPUs: (status key, Kueue's resource name, factor to its unit).
MANAGED = (("cpu", "cpu", 1.0), ("memory_gib", "memory", float(2**30)))


class SchedulerCollector(Collector):
    """Reads the scheduler's figures on every scrape."""

    def collect(self) -> Iterator[Metric]:
        figures = selectors.metrics_figures(now=get_clock().now())
        pending = GaugeMetricFamily("gqc_pending_workloads", "Jobs waiting in the quota.", labels=["cluster_queue"])
        admitted = GaugeMetricFamily(
            "gqc_admitted_active_workloads",
            "Jobs holding GPUs in the quota (running or releasing).",
            labels=["cluster_queue"],
        )
        counts: dict[str, dict[str, int]] = {}
        for quota, state, count in figures["jobs_by_quota_state"]:
            counts.setdefault(quota, {})[state] = count
        for quota, _guaranteed, _status in figures["quotas"]:
            counts.setdefault(quota, {})  # every quota has a series, 0 when it has no jobs
        for quota, by_state in sorted(counts.items()):
            pending.add_metric([quota], by_state.get(JobState.PENDING, 0))
            admitted.add_metric([quota], by_state.get(JobState.RUNNING, 0) + by_state.get(JobState.RELEASING, 0))
        yield pending
        yield admitted

        labels = ["cluster_queue", "resource"]
        unit = " (GPUs; cpu: cores; memory: bytes)"
        nominal = GaugeMetricFamily("gqc_cluster_queue_nominal_quota", f"The quota's guarantee{unit}.", labels=labels)
        fair = GaugeMetricFamily("gqc_cluster_queue_fair_share", f"The quota's fair share now{unit}.", labels=labels)
        usage = GaugeMetricFamily(
            "gqc_cluster_queue_resource_usage", f"What the quota's subtree holds{unit}.", labels=labels
        )
        borrowing = GaugeMetricFamily(
            "gqc_cluster_queue_borrowing",
            f"What is held beyond the guarantee, borrowed from idle quotas{unit}.",
            labels=labels,
        )
        for quota, guaranteed, status in figures["quotas"]:
            nominal.add_metric([quota, GPU], guaranteed)
            fair.add_metric([quota, GPU], status["fair_share"])
            usage.add_metric([quota, GPU], status["allocated"])
            borrowing.add_metric([quota, GPU], max(0.0, status["allocated"] - guaranteed))
            for key, resource, factor in MANAGED:
                managed = cast("ResourceFigures | None", status.get(key))
                if managed is None:  # the quota's pool manages GPUs only
                    continue
                nominal.add_metric([quota, resource], managed["guaranteed"] * factor)
                fair.add_metric([quota, resource], managed["fair_share"] * factor)
                usage.add_metric([quota, resource], managed["allocated"] * factor)
                borrowing.add_metric([quota, resource], max(0.0, managed["allocated"] - managed["guaranteed"]) * factor)
        yield from (nominal, fair, usage, borrowing)

        preempted = CounterMetricFamily(
            "gqc_preempted_workloads",
            "Evictions of the quota's jobs, by the rule that evicted them.",
            labels=["cluster_queue", "reason"],
        )
        for quota, rule, count in figures["preemptions"]:
            preempted.add_metric([quota, rule], count)
        yield preempted

        for name, documentation, histogram in (
            ("gqc_cycle_duration_seconds", "Committed scheduling cycles, by duration.", figures["cycle_duration"]),
            ("gqc_admission_wait_time_seconds", "From submission to each admission.", figures["admission_wait"]),
        ):
            buckets = [(_bound(bound), count) for bound, count in histogram["buckets"]]
            buckets.append(("+Inf", histogram["count"]))
            yield HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=histogram["sum"])


class GpuCollector(Collector):
    """DCGM exporter's names for what the console samples per GPU (docs/telemetry.md)."""

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "gpu", "job_id", "job_name"]
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=labels)
        used = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=labels)
        for reading in telemetry_selectors.latest_gpu_readings(now=get_clock().now()):
            job_id = "" if reading.job_id is None else str(reading.job_id)
            values = [reading.node, str(reading.gpu), job_id, reading.job]
            util.add_metric(values, reading.utilisation)
            used.add_metric(values, reading.memory_used_mib)
        yield util
        yield used


def _bound(seconds: float) -> str:
    return f"{seconds:g}"


def scrape_allowed(request: HttpRequest) -> bool:
    """METRICS_TOKEN set: the bearer token, compared in constant time. Unset: loopback only."""
    token: str = getattr(settings, "METRICS_TOKEN", "")
    if token:
        header = request.headers.get("Authorization", "")
        scheme, _, offered = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(offered.strip().encode(), token.encode())
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        why = (
            "send Authorization: Bearer <METRICS_TOKEN>"
            if getattr(settings, "METRICS_TOKEN", "")
            else "only loopback clients may scrape while METRICS_TOKEN is unset"
        )
        return HttpResponse(f"/metrics refused: {why}.\n", status=403, content_type="text/plain; charset=utf-8")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector())
    registry.register(GpuCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
