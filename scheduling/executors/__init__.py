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


# Executors of nodes by their `Node.executor` (beside the agent's, which scheduling has itself):
# apps above scheduling hand theirs in from their ready() (the slurm app: "slurm").
_NODE_EXECUTORS: dict[str, Callable[[], Executor]] = {}


def register_node_executor(node_executor: str, factory: Callable[[], Executor]) -> None:
    """Jobs placed on nodes whose `executor` is `node_executor` go to the executor `factory` makes."""
    _NODE_EXECUTORS[str(node_executor)] = factory


class PerNodeExecutor:
    """The chosen executor for jobs on its nodes, the agent executor for jobs on agent nodes
    (`Node.executor`), and each registered node executor for jobs on its nodes (the slurm app's),
    so simulated and real nodes mix in one cluster. It answers to the chosen executor's name: the
    scheduler's status shows the cluster's default."""

    def __init__(self, default: Executor) -> None:
        self.default = default
        self.agent = AgentExecutor()
        self.by_node_executor: dict[str, Executor] = {"agent": self.agent}
        self.by_node_executor.update({name: factory() for name, factory in _NODE_EXECUTORS.items()})
        self.name = default.name

    def _split(self, jobs: Sequence[Job]) -> list[tuple[Executor, list[Job]]]:
        from scheduling.agent_selectors import node_executors_of_jobs, real_nodes_exist

        # Where every node is simulated (simulate's clusters), so is every job: one cheap read.
        executor_of = node_executors_of_jobs([job.pk for job in jobs]) if jobs and real_nodes_exist() else {}
        groups: dict[str, list[Job]] = {}
        for job in jobs:
            groups.setdefault(executor_of.get(job.pk, ""), []).append(job)
        return [(self.by_node_executor.get(name, self.default), group) for name, group in groups.items()]

    def on_admitted(self, job: Job) -> None:
        self.on_admitted_many([job])

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        if not jobs:
            self.default.on_admitted_many(jobs)
        for executor, group in self._split(jobs):
            executor.on_admitted_many(group)

    def on_evicted(self, job: Job) -> None:
        self.on_evicted_many([job])

    def on_evicted_many(self, jobs: Sequence[Job]) -> None:
        """Every job one commit evicted, each to its node's executor: one read of where they run
        for all of them (a cycle of S4 evicts hundreds, and a read per job was most of its queries)."""
        for executor, group in self._split(jobs):
            for one in group:
                executor.on_evicted(one)

    def on_committed(self, admitted_ids: Sequence[int], evicted_ids: Sequence[int]) -> None:
        """What one commit admitted (in the engine's order) and evicted, to each job's node's
        executor: one read of where they run, one of the jobs per executor. An executor that names
        the columns it reads (`job_fields`) gets its jobs with those alone: whole Job rows for the
        thousand admissions of one of simulate's S3 bursts were most of the executor's time."""
        from scheduling.agent_selectors import node_executors_of_jobs, real_nodes_exist

        ids = [*admitted_ids, *evicted_ids]
        if not ids:
            return
        executor_of = node_executors_of_jobs(ids) if real_nodes_exist() else {}
        groups: dict[str, set[int]] = {}
        for pk in ids:
            groups.setdefault(executor_of.get(pk, ""), set()).add(pk)
        split = [(self.by_node_executor.get(name, self.default), group) for name, group in groups.items()]
        jobs: dict[int, Job] = {}
        for executor, group in split:
            fields: Sequence[str] | None = getattr(executor, "job_fields", None)
            rows = Job.objects.filter(pk__in=list(group))
            jobs.update((job.pk, job) for job in (rows.only(*fields) if fields else rows))
        for executor, group in split:
            admitted = [jobs[pk] for pk in admitted_ids if pk in group and pk in jobs]
            if admitted:
                executor.on_admitted_many(admitted)
        for executor, group in split:
            for pk in evicted_ids:
                if pk in group and pk in jobs:
                    executor.on_evicted(jobs[pk])

    def tick(self, now: datetime) -> int:
        return self.default.tick(now) + sum(executor.tick(now) for executor in self.by_node_executor.values())


def get_executor(name: str | None = None) -> PerNodeExecutor:
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
    "register_node_executor",
]
