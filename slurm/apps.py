from __future__ import annotations

from django.apps import AppConfig


class SlurmConfig(AppConfig):
    name = "slurm"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # scheduling sits below this app: it is handed the executor for Slurm's nodes here.
        from quotas.models import NodeExecutor
        from scheduling.executors import register_node_executor
        from slurm.executor import SlurmExecutor

        register_node_executor(NodeExecutor.SLURM, SlurmExecutor)
