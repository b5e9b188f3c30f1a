"""Executors by name; the setting SCHEDULER_EXECUTOR picks one (default "simulated")."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from scheduling.executors.base import Executor
from scheduling.executors.simulated import SimulatedExecutor

_REGISTRY: dict[str, Callable[[], Executor]] = {"simulated": SimulatedExecutor}


def register_executor(name: str, factory: Callable[[], Executor]) -> None:
    """Real hosts (processes on GPU machines, Kubernetes) plug in here."""
    _REGISTRY[name] = factory


def executor_names() -> list[str]:
    return sorted(_REGISTRY)


def get_executor(name: str | None = None) -> Executor:
    chosen = name or str(getattr(settings, "SCHEDULER_EXECUTOR", "simulated"))
    if chosen not in _REGISTRY:
        raise ValueError(f"SCHEDULER_EXECUTOR {chosen!r} is unknown; known executors: {', '.join(executor_names())}")
    return _REGISTRY[chosen]()


__all__ = ["Executor", "SimulatedExecutor", "executor_names", "get_executor", "register_executor"]
