from typing import Any

from django.apps import AppConfig


def _store_agent_samples(sender: Any, *, node: Any, samples: Any, **kwargs: Any) -> None:
    from telemetry.services import record_agent_samples

    record_agent_samples(node=node, samples=samples)


class TelemetryConfig(AppConfig):
    name = "telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The node agents' beats arrive in scheduling, which sits below telemetry and cannot call it.
        from scheduling.agent_services import gpu_samples_reported

        gpu_samples_reported.connect(_store_agent_samples, dispatch_uid="telemetry-agent-samples")
        # Scheduling's Nodes and Quota pages show these figures and cannot import telemetry.
        from scheduling import page_figures
        from telemetry.quota_charts import quota_utilisation
        from telemetry.selectors import latest_gpu_readings

        page_figures.register(gpu_readings=latest_gpu_readings, quota_utilisation=quota_utilisation)
