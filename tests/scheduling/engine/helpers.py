"""A tiny scenario driver: events on a snapshot, then cycles until nothing changes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduling.engine import CycleResult, Job, Node, Quota, Snapshot
from scheduling.engine.simulate import converge

KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "inference": {"priority": 7, "preemptible": False},
    "notebook": {"priority": 5, "preemptible": False},
    "training": {"priority": 3, "preemptible": True},
}


def nodes(prefix: str, count: int, gpus: int) -> tuple[Node, ...]:
    return tuple(Node(f"{prefix}-{i}", gpus) for i in range(1, count + 1))


def quotas(*specs: tuple[str, str | None, float] | Quota) -> tuple[Quota, ...]:
    built = []
    for order, spec in enumerate(specs):
        if isinstance(spec, Quota):
            built.append(replace(spec, created_order=order))
        else:
            name, parent, guaranteed = spec
            built.append(Quota(name, parent, guaranteed, created_order=order))
    return tuple(built)


class Scenario:
    def __init__(self, node_list: tuple[Node, ...], quota_list: tuple[Quota, ...], placement: str = "pack") -> None:
        self.snapshot = Snapshot(node_list, quota_list, (), 0.0, placement)
        self.clock = 0
        self.results: list[CycleResult] = []

    def submit(self, job_id: str, quota: str, gpus: float, kind: str = "training", **fields: Any) -> Scenario:
        self.clock += 1
        values = dict(KIND_DEFAULTS[kind])
        values.update(fields)
        job = Job(job_id, quota, gpus, submitted_at=float(self.clock), **values)
        self.snapshot = replace(self.snapshot, jobs=(*self.snapshot.jobs, job))
        return self.run()

    def cancel(self, job_id: str) -> Scenario:
        self.snapshot = replace(self.snapshot, jobs=tuple(j for j in self.snapshot.jobs if j.id != job_id))
        return self.run()

    def set_quotas(self, quota_list: tuple[Quota, ...]) -> Scenario:
        self.snapshot = replace(self.snapshot, quotas=quota_list)
        return self.run()

    def advance(self, seconds: float) -> Scenario:
        from scheduling.engine.simulate import release_expired

        self.snapshot = release_expired(self.snapshot, self.snapshot.now + seconds)
        return self.run()

    def run(self) -> Scenario:
        self.snapshot, self.results = converge(self.snapshot)
        return self

    @property
    def last(self) -> CycleResult:
        return self.results[-1]

    @property
    def decisions(self) -> list[Any]:
        return [d for result in self.results for d in result.decisions]

    def job(self, job_id: str) -> Job:
        return next(j for j in self.snapshot.jobs if j.id == job_id)

    def state(self, job_id: str) -> str:
        return self.job(job_id).state

    def replicas(self, job_id: str) -> int:
        return len(self.job(job_id).placements)

    def allocated(self, quota: str) -> float:
        return self.last.quotas[quota].allocated
