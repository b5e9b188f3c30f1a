"""Parsing and validating a scenario file into `scenario.Scenario`, before anything is written.

Rules that span rows (children's guarantees within the parent's, limit ≥ guarantee) stay with
the quota services; `run.play` reports their errors in the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from quotas import services as quota_services
from scheduling.simulate import loader
from scheduling.simulate.collector import batch_collection
from scheduling.simulate.fields import (
    _boolean,
    _choice,
    _integer,
    _known_keys,
    _list,
    _mapping,
    _number,
    _optional,
    _quota_fields,
    _string,
)
from scheduling.simulate.scenario import (
    END_ACTIONS,
    KINDS,
    NODE_ACTIONS,
    PLACEMENTS,
    SETTABLE_QUOTA_FIELDS,
    STEP_ACTIONS,
    AdvanceStep,
    CheckpointStep,
    EndJobStep,
    JobSpec,
    NodeStateStep,
    PoolSpec,
    QuotaSpec,
    ScaleStep,
    Scenario,
    ScenarioError,
    SetStep,
    Step,
    SubmitStep,
    TransferStep,
    WorkspaceSpec,
    show,
)

# ---------------------------------------------------------------------------------------------
# Parsing


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; a missing or unreadable file is a ScenarioError too."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(str(path), None, f"cannot read the file: {error.strerror or error}") from None
    with batch_collection():
        return parse_scenario(text)


def parse_scenario(text: str) -> Scenario:
    try:
        # libyaml's loader when PyYAML has it (5x faster on a 10,000-job file), repeated scalars built once.
        document = loader.load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ScenarioError("scenario", None, f"not valid YAML{where}: {problem}") from None
    return parse_document(document)


def parse_document(document: object) -> Scenario:
    """A scenario already loaded from YAML (or built in Python, as the benchmarks do)."""
    return _Parser().scenario(document)


class _Parser:
    """Holds the names seen so far so that later steps can be checked against them."""

    def __init__(self) -> None:
        # Sets: each of a 10,000-job file's jobs looks its quota up (a list of 1,110 scanned each time).
        self.node_names: set[str] = set()
        self.quota_names: set[str] = set()
        self.workspace_quotas: dict[str, frozenset[str]] = {}
        self.job_steps: dict[str, int] = {}
        self.pools: tuple[PoolSpec, ...] = ()
        self.node_pools: dict[str, str] = {}

    def scenario(self, document: object) -> Scenario:
        where = "scenario"
        top = _mapping(document, where, None, "a mapping with nodes, quotas and steps")
        _known_keys(top, where, ("name", "description", "pool", "pools", "nodes", "quotas", "workspaces", "steps"))
        name = _string(top.get("name", "scenario"), where, "name")
        description = _string(top.get("description", ""), where, "description", allow_empty=True)
        placement = "pack"
        if "pool" in top and "pools" in top:
            raise ScenarioError(where, "pools", "give either pool: (one pool) or pools: (several), not both")
        if "pool" in top:
            pool = _mapping(top["pool"], where, "pool", "a mapping like {placement: pack}")
            _known_keys(pool, "pool", ("placement",))
            placement = _choice(pool.get("placement", "pack"), "pool", "placement", PLACEMENTS)
        if "pools" in top:
            self.pools = self.pool_list(_list(top["pools"], where, "pools", required=True))
        nodes = self.nodes(_list(top.get("nodes"), where, "nodes", required=True))
        quotas = self.quotas(_list(top.get("quotas"), where, "quotas", required=True))
        default_workspaces = top.get("workspaces") is None
        if default_workspaces:
            workspaces = tuple(WorkspaceSpec(name=quota.name, quotas=(quota.name,)) for quota in quotas)
            self.workspace_quotas = {ws.name: frozenset(ws.quotas) for ws in workspaces}
        else:
            workspaces = self.workspaces(_list(top["workspaces"], where, "workspaces", required=True))
        raw_steps = _list(top.get("steps", []), where, "steps", required=False)
        steps = tuple(self.step(raw, number) for number, raw in enumerate(raw_steps, start=1))
        return Scenario(
            name=name,
            description=description,
            placement=placement,
            nodes=nodes,
            quotas=quotas,
            workspaces=workspaces,
            steps=steps,
            default_workspaces=default_workspaces,
            pools=self.pools,
            node_pools=self.node_pools,
        )

    # -- cluster ------------------------------------------------------------------------------

    def pool_list(self, raw_pools: list[Any]) -> tuple[PoolSpec, ...]:
        pools: list[PoolSpec] = []
        for index, raw in enumerate(raw_pools, start=1):
            where = f"pools[{index}]"
            entry = _mapping(raw, where, None, "a mapping like {name: h100, placement: pack}")
            where = f"pool {entry['name']!r}" if isinstance(entry.get("name"), str) else where
            _known_keys(entry, where, ("name", "placement"))
            name = _string(entry.get("name"), where, "name")
            if any(pool.name == name for pool in pools):
                raise ScenarioError(where, "name", f"duplicate pool name {name!r}")
            pools.append(
                PoolSpec(name=name, placement=_choice(entry.get("placement", "pack"), where, "placement", PLACEMENTS))
            )
        if not pools:
            raise ScenarioError("scenario", "pools", "pools: needs at least one pool")
        return tuple(pools)

    def pool_of(self, entry: Mapping[str, Any], where: str, *, required: bool) -> str | None:
        """The pool an entry names: required of nodes and roots when the scenario lists `pools:`."""
        if not self.pools:
            if "pool" in entry:
                raise ScenarioError(where, "pool", "name pools first: a top-level pools: list (SCENARIOS.md)")
            return None
        if "pool" not in entry:
            if required:
                names = ", ".join(pool.name for pool in self.pools)
                raise ScenarioError(where, "pool", f"the scenario lists pools, so this names one of them: {names}")
            return None
        name = _string(entry["pool"], where, "pool")
        if all(pool.name != name for pool in self.pools):
            names = ", ".join(pool.name for pool in self.pools)
            raise ScenarioError(where, "pool", f"unknown pool {name!r}; the scenario's pools are {names}")
        return name

    def nodes(self, raw_nodes: list[Any]) -> tuple[quota_services.NewNode, ...]:
        nodes: list[quota_services.NewNode] = []
        for index, raw in enumerate(raw_nodes, start=1):
            where = f"nodes[{index}]"
            entry = _mapping(raw, where, None, "a mapping like {name: gpu, count: 2, gpus: 8}")
            where = f"node {entry['name']!r}" if isinstance(entry.get("name"), str) else where
            _known_keys(entry, where, ("name", "count", "gpus", "cpu", "memory_gib", "gpu_model", "pool"))
            pool = self.pool_of(entry, where, required=True)
            base = _string(entry.get("name"), where, "name")
            count = _integer(entry.get("count", 1), where, "count", minimum=1)
            gpus = _integer(entry.get("gpus"), where, "gpus", minimum=0)
            cpu = _number(entry.get("cpu", 0), where, "cpu")
            memory = _number(entry.get("memory_gib", 0), where, "memory_gib")
            model = _string(entry.get("gpu_model", ""), where, "gpu_model", allow_empty=True)
            names = [base] if count == 1 else [f"{base}-{n}" for n in range(1, count + 1)]
            for node_name in names:
                if node_name in self.node_names:
                    raise ScenarioError(where, "name", f"duplicate node name {node_name!r}")
                self.node_names.add(node_name)
                if pool is not None:
                    self.node_pools[node_name] = pool
                nodes.append(
                    quota_services.NewNode(name=node_name, gpus=gpus, cpu=cpu, memory_gib=memory, gpu_model=model)
                )
        if not nodes:
            raise ScenarioError("scenario", "nodes", "the cluster needs at least one node")
        return tuple(nodes)

    def quotas(self, raw_quotas: list[Any]) -> tuple[QuotaSpec, ...]:
        quotas: list[QuotaSpec] = []

        def walk(raw_level: list[Any], parent: str | None, root_pool: str | None, where_list: str) -> None:
            for index, raw in enumerate(raw_level, start=1):
                where = f"{where_list}[{index}]"
                entry = _mapping(raw, where, None, "a mapping like {name: team-a, gpus: 8}")
                if isinstance(entry.get("name"), str):
                    where = f"quota {entry['name']!r}"
                _known_keys(entry, where, ("name", "children", "pool", *SETTABLE_QUOTA_FIELDS))
                name = _string(entry.get("name"), where, "name")
                if name in self.quota_names:
                    raise ScenarioError(where, "name", f"duplicate quota name {name!r}")
                pool = self.pool_of(entry, where, required=parent is None)
                if parent is not None and pool is not None and pool != root_pool:
                    raise ScenarioError(
                        where, "pool", f"a child has its parent's pool {root_pool!r}; it cannot name {pool!r}"
                    )
                pool = pool if parent is None else root_pool
                self.quota_names.add(name)
                options = _quota_fields(entry, where)
                quotas.append(QuotaSpec(name=name, parent=parent, gpus=options.pop("gpus", 0.0), pool=pool, **options))
                children = _list(entry.get("children", []), where, "children", required=False)
                walk(children, name, pool, f"{where}.children")

        walk(raw_quotas, None, None, "quotas")
        if not quotas:
            raise ScenarioError("scenario", "quotas", "the tree needs at least one quota")
        return tuple(quotas)

    def workspaces(self, raw_workspaces: list[Any]) -> tuple[WorkspaceSpec, ...]:
        workspaces: list[WorkspaceSpec] = []
        for index, raw in enumerate(raw_workspaces, start=1):
            where = f"workspaces[{index}]"
            entry = _mapping(raw, where, None, "a mapping like {name: team-a, quotas: [Quota1]}")
            if isinstance(entry.get("name"), str):
                where = f"workspace {entry['name']!r}"
            _known_keys(entry, where, ("name", "quotas", "description"))
            name = _string(entry.get("name"), where, "name")
            if name in self.workspace_quotas:
                raise ScenarioError(where, "name", f"duplicate workspace name {name!r}")
            bound = tuple(
                self.known_quota(_string(q, where, "quotas"), where, "quotas")
                for q in _list(entry.get("quotas", []), where, "quotas", required=False)
            )
            description = _string(entry.get("description", ""), where, "description", allow_empty=True)
            self.workspace_quotas[name] = frozenset(bound)
            workspaces.append(WorkspaceSpec(name=name, quotas=bound, description=description))
        return tuple(workspaces)

    # -- steps --------------------------------------------------------------------------------

    def step(self, raw: object, number: int) -> Step:
        where = f"step {number}"
        if isinstance(raw, str) or not isinstance(raw, dict) or len(raw) != 1:
            raise ScenarioError(
                where, None, f"must be a mapping with exactly one action, one of {', '.join(STEP_ACTIONS)}"
            )
        ((action, body),) = raw.items()
        if action not in STEP_ACTIONS:
            raise ScenarioError(where, None, f"unknown action {action!r}; known: {', '.join(STEP_ACTIONS)}")
        where = f"step {number} ({action})"
        if action == "submit":
            return SubmitStep(number=number, jobs=self.submit(body, where, number))
        if action in END_ACTIONS:
            job = _string(body, where, "job")
            if job not in self.job_steps:
                raise ScenarioError(where, "job", f"unknown job {job!r} (not submitted in an earlier step)")
            return EndJobStep(number=number, job=job, action=action)
        if action in NODE_ACTIONS:
            node = _string(body, where, "node")
            if node not in self.node_names:
                raise ScenarioError(where, "node", f"unknown node {node!r}")
            return NodeStateStep(number=number, node=node, action=action)
        if action == "advance":
            return AdvanceStep(number=number, seconds=_number(body, where, "seconds"))
        if action == "checkpoint":
            return CheckpointStep(number=number, name=_string(body, where, "name"))
        entry = _mapping(body, where, None, "a mapping")
        if action == "transfer":
            _known_keys(entry, where, ("from", "to", "gpus"))
            source = self.known_quota(_string(entry.get("from"), where, "from"), where, "from")
            target = self.known_quota(_string(entry.get("to"), where, "to"), where, "to")
            return TransferStep(
                number=number, source=source, target=target, gpus=_number(entry.get("gpus"), where, "gpus")
            )
        if action == "scale":
            _known_keys(entry, where, ("quota", "gpus", "cpu", "memory_gib"))
            quota = self.known_quota(_string(entry.get("quota"), where, "quota"), where, "quota")
            amounts = {key: _number(entry[key], where, key) for key in ("gpus", "cpu", "memory_gib") if key in entry}
            if not amounts:
                raise ScenarioError(where, "gpus", "a scale step needs gpus, cpu or memory_gib")
            return ScaleStep(
                number=number,
                quota=quota,
                gpus=amounts.get("gpus"),
                cpu=amounts.get("cpu"),
                memory_gib=amounts.get("memory_gib"),
            )
        # set
        _known_keys(entry, where, ("quota", *SETTABLE_QUOTA_FIELDS))
        quota = self.known_quota(_string(entry.get("quota"), where, "quota"), where, "quota")
        changes = _quota_fields(entry, where, nullable=True)
        if not changes:
            raise ScenarioError(where, None, f"a set step needs at least one of {', '.join(SETTABLE_QUOTA_FIELDS)}")
        return SetStep(number=number, quota=quota, changes=changes)

    def submit(self, body: object, where: str, number: int) -> tuple[JobSpec, ...]:
        """One job (`count` copies of it), or a list of them: a burst that the cycle sees at once."""
        if isinstance(body, list):
            if not body:
                raise ScenarioError(where, None, "a list of jobs must not be empty")
            return tuple(job for entry in body for job in self.submit_one(entry, where, number))
        return self.submit_one(body, where, number)

    def submit_one(self, body: object, where: str, number: int) -> tuple[JobSpec, ...]:
        entry = _mapping(body, where, None, "a mapping like {name: train, quota: team-a, kind: training, gpus: 1}")
        _known_keys(
            entry,
            where,
            (
                "name",
                "count",
                "quota",
                "workspace",
                "kind",
                "gpus",
                "replicas",
                "min_replicas",
                "priority",
                "preemptible",
                "cpu",
                "memory_gib",
                "command",
                "duration",
                "grace_seconds",
                "requeue",
            ),
        )
        name = _string(entry.get("name"), where, "name")
        count = _integer(entry.get("count", 1), where, "count", minimum=1) if "count" in entry else None
        quota = self.known_quota(_string(entry.get("quota"), where, "quota"), where, "quota")
        workspace = self.workspace_for(entry.get("workspace"), quota, where)
        kind = _choice(entry.get("kind", "training"), where, "kind", KINDS)
        gpus = _number(entry.get("gpus"), where, "gpus")
        if gpus <= 0:
            raise ScenarioError(where, "gpus", f"must be more than 0, got {show(gpus)}")
        replicas = _integer(entry.get("replicas", 1), where, "replicas", minimum=1)
        min_replicas = _optional(entry, "min_replicas", lambda v: _integer(v, where, "min_replicas", minimum=1))
        if min_replicas is not None and min_replicas > replicas:
            raise ScenarioError(
                where, "min_replicas", f"must be at most replicas: min_replicas {min_replicas} > replicas {replicas}"
            )
        priority = _optional(entry, "priority", lambda v: _integer(v, where, "priority", minimum=1))
        if priority is not None and priority > 9:
            raise ScenarioError(where, "priority", f"must be between 1 and 9, got {priority}")
        spec_fields: dict[str, Any] = {
            "quota": quota,
            "workspace": workspace,
            "kind": kind,
            "gpus": gpus,
            "replicas": replicas,
            "min_replicas": min_replicas,
            "priority": priority,
            "preemptible": _optional(entry, "preemptible", lambda v: _boolean(v, where, "preemptible")),
            "cpu": _number(entry.get("cpu", 0), where, "cpu"),
            "memory_gib": _number(entry.get("memory_gib", 0), where, "memory_gib"),
            "command": _string(entry.get("command", ""), where, "command", allow_empty=True),
            "duration": _optional(entry, "duration", lambda v: _number(v, where, "duration")),
            "grace_seconds": _number(entry.get("grace_seconds", 0), where, "grace_seconds"),
            "requeue": _boolean(entry.get("requeue", True), where, "requeue"),
        }
        names = [name] if count is None else [f"{name}-{n}" for n in range(1, count + 1)]
        jobs: list[JobSpec] = []
        for job_name in names:
            if job_name in self.job_steps:
                raise ScenarioError(
                    where,
                    "name",
                    f"duplicate job name {job_name!r} (first submitted in step {self.job_steps[job_name]})",
                )
            self.job_steps[job_name] = number
            jobs.append(JobSpec(name=job_name, **spec_fields))
        return tuple(jobs)

    def known_quota(self, name: str, where: str, field_name: str) -> str:
        if name not in self.quota_names:
            raise ScenarioError(where, field_name, f"unknown quota {name!r}")
        return name

    def workspace_for(self, raw: object, quota: str, where: str) -> str:
        """The named workspace, or the first one bound to the job's quota."""
        if raw is None:
            for workspace, bound in self.workspace_quotas.items():
                if quota in bound:
                    return workspace
            raise ScenarioError(where, "workspace", f"no workspace is bound to quota {quota!r}; name one")
        workspace = _string(raw, where, "workspace")
        if workspace not in self.workspace_quotas:
            raise ScenarioError(where, "workspace", f"unknown workspace {workspace!r}")
        if quota not in self.workspace_quotas[workspace]:
            raise ScenarioError(where, "quota", f"quota {quota!r} is not bound to workspace {workspace!r}")
        return workspace
