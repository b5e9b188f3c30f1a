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
