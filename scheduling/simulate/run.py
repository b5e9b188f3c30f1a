"""Playing a scenario through the console's own services and cycle.

`play` runs on whatever database the caller has connected: `manage.py simulate` wraps it in
`throwaway_database()` so the console's own database is never touched.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.db import transaction

from quotas import services as quota_services
from quotas.hooks import QuotaStatus
from quotas.models import Node, NodeState, Quota, ResourcePool
from scheduling import services as job_services
from scheduling import triggers
from scheduling.clock import SimulatedClock, use_clock
from scheduling.commit_rows import DeferredReasons
from scheduling.models import Job, JobState, ReplicaPlacementRecord
from scheduling.pending_reasons import with_shown_reason
from scheduling.selectors import quota_status_summary
from scheduling.simulate.collector import batch_collection, set_aside
from scheduling.simulate.cycle_lock import InProcessCycleLock
from scheduling.simulate.resources import resource_figures
from scheduling.simulate.scenario import (
    SETTABLE_QUOTA_FIELDS,
    AdvanceStep,
    Checkpoint,
    CheckpointStep,
    EndJobStep,
    JobSpec,
    NodeStateStep,
    QuotaSpec,
    ScaleStep,
    Scenario,
    ScenarioError,
    SetStep,
    Step,
    SubmitStep,
    TransferStep,
    figure,
    step_label,
)
from workspaces import services as workspace_services
from workspaces.models import Workspace

SIMULATION_START: Final = datetime(2025, 1, 1, tzinfo=UTC)
SIMULATE_USERNAME: Final = "simulate"
# A quota the status figures leave out (as the quotas app's status hook fills it in).
_NO_FIGURES: Final = QuotaStatus(fair_share=0.0, allocated=0.0, allocated_self=0.0, running=0, pending=0)


def _scenario_error(where: str, error: ValidationError | PermissionDenied) -> ScenarioError:
    """A service's refusal, told like a parse error: the step (or object) and the field."""
    if isinstance(error, PermissionDenied):
        return ScenarioError(where, None, str(error) or "not allowed")
    if hasattr(error, "error_dict"):
        field_name, messages = next(iter(error.message_dict.items()))
        return ScenarioError(where, None if field_name == NON_FIELD_ERRORS else field_name, " ".join(messages))
    return ScenarioError(where, None, " ".join(error.messages))


class ScenarioRunner:
    """Plays one scenario on the connected database, on a simulated clock.

    Everything goes through the services the console uses (quota, workspace and job services,
    the cycle, the simulated executor); after each step the scheduler converges.
    """

    def __init__(self, scenario: Scenario, *, clock: SimulatedClock, max_cycles: int = 50) -> None:
        self.scenario = scenario
        self.clock = clock
        self.start = clock.now()
        self.max_cycles = max_cycles
        self.cycles = 0
        self.actor: AbstractUser | None = None
        self.quotas: dict[str, Quota] = {}
        self.nodes: dict[str, Node] = {}
        self.workspaces: dict[str, Workspace] = {}
        self.jobs: dict[str, int] = {}
        self.lock = InProcessCycleLock()
        # The pending reasons of a converge's cycles, written once at its end (DeferredReasons).
        self.reasons = DeferredReasons()

    # -- setting up the cluster ---------------------------------------------------------------

    def set_up(self) -> None:
        user_model = get_user_model()
        self.actor = user_model.objects.create_superuser(username=SIMULATE_USERNAME, email="", password=None)
        with transaction.atomic():
            self.set_up_cluster()
            self.set_up_workspaces()
        self.converge()

    def set_up_cluster(self) -> None:
        pools = self.make_pools()
        for pool_name, pool in pools.items():
            self.set_up_pool(pool, pool_name)

    def make_pools(self) -> dict[str | None, ResourcePool]:
        """The scenario's pools by name (None: the default pool of a scenario without `pools:`)."""
        if not self.scenario.pools:
            # The placement is the one setting `pool:` gives the default pool; written before any node.
            pool, _ = ResourcePool.objects.update_or_create(
                name=ResourcePool.DEFAULT_NAME, defaults={"placement": self.scenario.placement}
            )
            return {None: pool}
        made: dict[str | None, ResourcePool] = {}
        for spec in self.scenario.pools:
            try:
                made[spec.name] = quota_services.create_pool(actor=self.actor, name=spec.name, placement=spec.placement)
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"pool {spec.name!r}", error) from None
        return made

    def set_up_pool(self, pool: ResourcePool, pool_name: str | None) -> None:
        """The nodes and the quota tree of one pool (of every node and quota without `pools:`)."""
        node_pools = self.scenario.node_pools
        node_specs = [spec for spec in self.scenario.nodes if node_pools.get(spec.name) == pool_name]
        quota_specs = [spec for spec in self.scenario.quotas if spec.pool == pool_name]
        # All nodes in one service call (one insert of nodes, one of devices); if it refuses,
        # they are created one by one instead, so that the refusal names the first bad node.
        try:
            with transaction.atomic():
                nodes = quota_services.create_nodes(actor=self.actor, pool=pool, nodes=node_specs)
        except (ValidationError, PermissionDenied):
            self.create_nodes_one_by_one(pool, node_specs)
        else:
            self.nodes.update({node.name: node for node in nodes})
        # The whole tree in one service call (one lock, one validation, one insert per level);
        # if it refuses, the quotas are created one by one instead, so that the refusal names the
        # first quota that breaks a rule, exactly as before.
        try:
            with transaction.atomic():
                created = quota_services.create_quota_tree(
                    actor=self.actor,
                    pool=pool,
                    quotas=[
                        quota_services.NewQuota(
                            name=spec.name,
                            parent=spec.parent,
                            gpus=spec.gpus,
                            **{
                                name: getattr(spec, name)
                                for name in SETTABLE_QUOTA_FIELDS
                                if name != "gpus" and getattr(spec, name) is not None
                            },
                        )
                        for spec in quota_specs
                    ],
                )
        except (ValidationError, PermissionDenied):
            self.create_quotas_one_by_one(pool, quota_specs)
        else:
            self.quotas.update({quota.name: quota for quota in created})

    def set_up_workspaces(self) -> None:
        for workspace_spec in self.scenario.workspaces:
            try:
                self.workspaces[workspace_spec.name] = workspace_services.create_workspace(
                    actor=self.actor,
                    name=workspace_spec.name,
                    description=workspace_spec.description,
                    quotas=[self.quotas[name] for name in workspace_spec.quotas],
                )
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"workspace {workspace_spec.name!r}", error) from None

    def create_nodes_one_by_one(self, pool: ResourcePool, specs: list[quota_services.NewNode]) -> None:
        for spec in specs:
            try:
                node = quota_services.create_node(actor=self.actor, pool=pool, **asdict(spec))
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"node {spec.name!r}", error) from None
            self.nodes[spec.name] = node

    def create_quotas_one_by_one(self, pool: ResourcePool, specs: list[QuotaSpec]) -> None:
        # getattr with a default, here and in set_up_pool: a setting the quota services know and a
        # scenario cannot give yet (cpu_limit, memory_gib_limit) is left to the service's default.
        for quota_spec in specs:
            options = {
                name: getattr(quota_spec, name)
                for name in SETTABLE_QUOTA_FIELDS
                if name != "gpus" and getattr(quota_spec, name) is not None
            }
            try:
                quota = quota_services.create_quota(
                    actor=self.actor,
                    name=quota_spec.name,
                    parent=self.quotas[quota_spec.parent] if quota_spec.parent else None,
                    gpus=quota_spec.gpus,
                    pool=pool,
                    **options,
                )
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"quota {quota_spec.name!r}", error) from None
            assert isinstance(quota, Quota)
            self.quotas[quota_spec.name] = quota

    # -- steps --------------------------------------------------------------------------------

    def play(self, on_checkpoint: Callable[[Checkpoint], None] | None = None) -> list[Checkpoint]:
        self.set_up()
        checkpoints: list[Checkpoint] = []
        for step in self.scenario.steps:
            checkpoint = self.run_step(step)
            if checkpoint is not None:
                checkpoints.append(checkpoint)
                if on_checkpoint is not None:
                    on_checkpoint(checkpoint)
        return checkpoints

    def run_step(self, step: Step) -> Checkpoint | None:
        if isinstance(step, CheckpointStep):
            return self.checkpoint(step.name)
        if isinstance(step, AdvanceStep):
            self.advance(step.seconds)
            return None
        try:
            self.apply(step)
        except (ValidationError, PermissionDenied) as error:
            raise _scenario_error(step_label(step), error) from None
        self.converge()
        return None

    def apply(self, step: Step) -> None:
        actor = self.actor
        if isinstance(step, SubmitStep):
            # One bulk submit per burst: a thousand jobs commit at once (three inserts), as a
            # burst of API calls coalesces into one cycle request in the console.
            submitted = job_services.submit_jobs(actor=None, submissions=[self.submission(job) for job in step.jobs])
            self.jobs.update({job.name: job.pk for job in submitted})
        elif isinstance(step, EndJobStep):
            ended = Job.objects.get(pk=self.jobs[step.job])
            if step.action == "cancel":
                job_services.cancel_job(actor=None, job=ended)
            elif step.action == "finish":
                job_services.finish_job(job=ended, succeeded=True, message="finished by the scenario")
            else:
                job_services.fail_job(job=ended, message="failed by the scenario")
        elif isinstance(step, TransferStep):
            quota_services.transfer_quota(
                actor=actor, source=self.quota(step.source), target=self.quota(step.target), gpus=step.gpus
            )
        elif isinstance(step, ScaleStep):
            amounts = {k: getattr(step, k) for k in ("gpus", "cpu", "memory_gib") if getattr(step, k) is not None}
            quota_services.scale_quota(actor=actor, quota=self.quota(step.quota), **amounts)
        elif isinstance(step, SetStep):
            quota_services.update_quota(actor=actor, quota=self.quota(step.quota), **dict(step.changes))
        elif isinstance(step, NodeStateStep):
            node = Node.objects.get(pk=self.nodes[step.node].pk)
            state = NodeState.NOT_READY if step.action == "node_down" else NodeState.READY
            quota_services.set_node_state(actor=actor, node=node, state=state)

    def submission(self, spec: JobSpec) -> job_services.JobSubmission:
        return job_services.JobSubmission(
            workspace=self.workspaces[spec.workspace], quota=self.quotas[spec.quota], **spec.shape()
        )

    def quota(self, name: str) -> Quota:
        """Fresh from the database: an earlier step may have changed it."""
        return Quota.objects.get(pk=self.quotas[name].pk)

    # -- time ---------------------------------------------------------------------------------

    def converge(self) -> None:
        """Cycles (each with its executor tick) until one changes nothing, as `services.converge`
        does, but under this run's own lock: a console cycling next door is never waited for.
        The pending reasons are written once, when it has settled: until then only the next
        cycle's commit reads them (DeferredReasons), and every step and checkpoint comes after."""
        with triggers.paused():
            for _ in range(self.max_cycles):
                outcome = job_services.run_cycle(trigger="simulate", lock=self.lock, deferred_reasons=self.reasons)
                set_aside()  # what the cycle kept, out of the collector's next passes (collector.py)
                self.cycles += 1
                if outcome.committed and not outcome.changed:
                    self.reasons.flush()
                    return
                if not outcome.committed:
                    raise RuntimeError(
                        f"a simulated cycle was refused ({outcome.refused}); nothing else holds its lock"
                    )
        raise ScenarioError(
            "scenario", None, f"the scheduler did not settle within {self.max_cycles} cycles after a step"
        )

    def advance(self, seconds: float) -> None:
        """Move the clock event by event (a job ends, a grace period or a min runtime runs out),
        converging at each, so that a job started within the advance also runs its course."""
        target = self.clock.now() + timedelta(seconds=seconds)
        while True:
            upcoming = self.next_event()
            if upcoming is None or upcoming > target:
                break
            self.clock.advance(max(0.0, (upcoming - self.clock.now()).total_seconds()))
            self.converge()
        self.clock.advance(max(0.0, (target - self.clock.now()).total_seconds()))
        self.converge()

    def next_event(self) -> datetime | None:
        now = self.clock.now()
        moments: list[datetime] = []
        for started_at, duration in Job.objects.filter(
            state=JobState.RUNNING, duration__isnull=False, started_at__isnull=False
        ).values_list("started_at", "duration"):
            if started_at is not None and duration is not None:
                moments.append(started_at + timedelta(seconds=duration))
        for release_at in Job.objects.filter(state=JobState.RELEASING).values_list("release_at", flat=True):
            if release_at is not None:
                moments.append(release_at)
        if Job.objects.filter(state=JobState.PENDING).exists():
            # A running job past its min runtime becomes a possible victim for a waiting job.
            min_runtime = self.min_runtimes()
            for started_at, quota_id in Job.objects.filter(
                state=JobState.RUNNING, preemptible=True, started_at__isnull=False
            ).values_list("started_at", "quota_id"):
                if started_at is not None and min_runtime.get(quota_id):
                    moments.append(started_at + timedelta(seconds=min_runtime[quota_id]))
        future = [moment for moment in moments if moment > now]
        # A moment already due (a job that should have ended) is handled by the next converge.
        return min(future) if future else None

    def min_runtimes(self) -> dict[int, float]:
        """Each quota's min runtime, inherited from the nearest ancestor that sets one."""
        rows = {row[0]: row for row in Quota.objects.values_list("id", "parent_id", "min_runtime_seconds")}
        resolved: dict[int, float] = {}

        def resolve(quota_id: int) -> float:
            if quota_id not in resolved:
                _, parent_id, own = rows[quota_id]
                resolved[quota_id] = float(own) if own is not None else (resolve(parent_id) if parent_id else 0.0)
            return resolved[quota_id]

        for quota_id in rows:
            resolve(quota_id)
        return resolved

    # -- reading the state --------------------------------------------------------------------

    def checkpoint(self, name: str) -> Checkpoint:
        # The quotas as plain rows, not models (two objects each, with the pool): the status
        # figures are keyed by name, as the quotas app's status hook reads them.
        columns = ("id", "name", "gpus", "pool__name", "parent_id", "cpu", "memory_gib")
        quotas = list(Quota.objects.order_by("id").values_list(*columns))
        status = quota_status_summary()
        managed = resource_figures(quotas, self.clock.now())  # cpu and memory_gib, where managed
        quota_figures: dict[str, dict[str, Any]] = {}
        for _quota_id, quota_name, gpus, pool_name, *_resources in quotas:
            figures = status.get(quota_name, _NO_FIGURES)
            quota_figures[quota_name] = {
                "guaranteed": figure(gpus),
                "fair_share": figure(figures["fair_share"]),
                "allocated": figure(figures["allocated"]),
                "allocated_self": figure(figures["allocated_self"]),
                "running": figures["running"],
                "pending": figures["pending"],
                "pool": pool_name,
                **managed.get(quota_name, {}),
            }
        # Every job of the private database is one of the scenario's, so no id filter (a list
        # of 10,000 ids is more than SQLite parses); four queries whatever the size, and plain
        # tuples, the names of quotas and nodes looked up here rather than joined per row.
        by_pk = {pk: name for name, pk in self.jobs.items()}
        quota_names = {quota_id: quota_name for quota_id, quota_name, *_ in quotas}
        node_names = dict(Node.objects.values_list("id", "name"))
        nodes_of: dict[int, dict[int, str]] = defaultdict(dict)
        for job_id, node_id in ReplicaPlacementRecord.objects.values_list("job_id", "node_id"):
            nodes_of[job_id][node_id] = node_names[node_id]
        job_figures: dict[str, dict[str, Any]] = {}
        pending = JobState.PENDING
        for (
            job_id,
            state,
            quota_id,
            allocated_gpus,
            running_replicas,
            preemptions,
            reason_code,
            reason_message,
            position,
        ) in with_shown_reason(Job.objects.order_by("id")).values_list(
            "id",
            "state",
            "quota_id",
            "allocated_gpus",
            "running_replicas",
            "preemptions",
            "shown_reason_code",  # the pending reason is in a table of its own (scheduling.pending_reasons)
            "shown_reason_message",
            "shown_reason_position",
        ):
            job_name = by_pk.get(job_id)
            if job_name is None:
                continue
            placed = nodes_of.get(job_id)
            job_figures[job_name] = {
                "state": state,
                "quota": quota_names[quota_id],
                "gpus": figure(allocated_gpus),
                "replicas": running_replicas,
                "nodes": [placed[node_id] for node_id in sorted(placed)] if placed else [],
                "preemptions": preemptions,
                "reason": (
                    {"code": reason_code, "message": reason_message, "position": position}
                    if state == pending and reason_code
                    else None
                ),
            }
        elapsed = (self.clock.now() - self.start).total_seconds()
        return Checkpoint(name=name, time=elapsed, quotas=quota_figures, jobs=job_figures)


def play(
    scenario: Scenario,
    *,
    on_checkpoint: Callable[[Checkpoint], None] | None = None,
    start: datetime = SIMULATION_START,
) -> list[Checkpoint]:
    """Play the scenario on the connected database (see `throwaway_database`) and a simulated clock."""
    clock = SimulatedClock(start)
    with use_clock(clock), batch_collection():
        return ScenarioRunner(scenario, clock=clock).play(on_checkpoint)
