"""Celery tasks of telemetry: thin, each calls one service. Delivered twice, the sampler writes
a second sample at another instant (harmless) and the downsampling finds nothing new."""

from __future__ import annotations

from celery import shared_task

from telemetry import retention, services


@shared_task(name="telemetry.tasks.sample_simulated_gpus", ignore_result=True)
def sample_simulated_gpus() -> int:
    return services.record_simulated_samples()


@shared_task(name="telemetry.tasks.downsample_and_prune", ignore_result=True)
def downsample_and_prune() -> dict[str, dict[int, int]]:
    return retention.downsample_and_prune()
