"""Executors by name; the setting SCHEDULER_EXECUTOR picks one (default "simulated")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from django.conf import settings

from scheduling.executors.agent import AgentExecutor
from scheduling.executors.base import Executor
from scheduling.executors.simulated import SimulatedExecutor
from scheduling.models import Job

_REGISTRY: dict[str, Callable[[], Executor]] = {"simulated": SimulatedExecutor}


def register_executor(name: str, factory: Callable[[], Executor]) -> None:
    """Real hosts (processes on GPU machines, Kubernetes) plug in here."""
    _REGISTRY[name] = factory


def executor_names() -> list[str]:
    return sorted(_REGISTRY)


class PerNodeExecutor:
    """The chosen executor for jobs on its nodes, the agent executor for jobs on agent nodes
    (`Node.executor`), so simulated and real nodes mix in one cluster. It answers to the chosen
    executor's name: the scheduler's status shows the cluster's default."""

    def __init__(self, default: Executor) -> None:
        self.default = default
        self.agent = AgentExecutor()
        self.name = default.name

    def _split(self, jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
        from scheduling.agent_selectors import jobs_on_agent_nodes

        on_agents = jobs_on_agent_nodes([job.pk for job in jobs]) if jobs else set()
        return [job for job in jobs if job.pk not in on_agents], [job for job in jobs if job.pk in on_agents]

    def on_admitted(self, job: Job) -> None:
        self.on_admitted_many([job])

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        default, on_agents = self._split(jobs)
        self.default.on_admitted_many(default)
        self.agent.on_admitted_many(on_agents)

    def on_evicted(self, job: Job) -> None:
        default, on_agents = self._split([job])
        for one in default:
            self.default.on_evicted(one)
        for one in on_agents:
            self.agent.on_evicted(one)

    def tick(self, now: datetime) -> int:
        return self.default.tick(now) + self.agent.tick(now)


def get_executor(name: str | None = None) -> Executor:
    chosen = name or str(getattr(settings, "SCHEDULER_EXECUTOR", "simulated"))
    if chosen not in _REGISTRY:
        raise ValueError(f"SCHEDULER_EXECUTOR {chosen!r} is unknown; known executors: {', '.join(executor_names())}")
    return PerNodeExecutor(_REGISTRY[chosen]())


__all__ = [
    "AgentExecutor",
    "Executor",
    "PerNodeExecutor",
    "SimulatedExecutor",
    "executor_names",
    "get_executor",
    "register_executor",
]
