"""One engine result applied inside the cycle's transaction, decision by decision: evictions and
shrinks first, then consolidation moves, admissions and growth.

Each decision is a conditional update: the job must be in the state and revision the snapshot
saw, otherwise that decision is skipped; each placement must fit the devices as the transaction
sees them (scheduling.commit_rows).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from operator import attrgetter, countOf

from django.db.models import F

from quotas.bounds import readable
from scheduling import engine, triggers
from scheduling.commit_rows import _EPSILON, Placement, _Applied, _CommitRows
from scheduling.engine import types as engine_types
from scheduling.lifecycle import add_event, released_event, released_values
from scheduling.models import Job, JobEventKind, JobState, ReplicaPlacementRecord

logger = logging.getLogger(__name__)

_state_of = attrgetter("state")


def _gpus_of(placements: list[Placement]) -> float:
    return sum(fraction if fraction < 1 else float(len(devices)) for _node, devices, fraction in placements)


class _Commit(_CommitRows):
    """Applies one engine result inside the caller's transaction."""

    # --- the whole result --------------------------------------------------------------------

    def apply(self, result: engine.CycleResult) -> _Applied:
        admits = {d.job_id for d in result.decisions if isinstance(d, engine.Admit)}
        moves = {
            d.job_id
            for d in result.decisions
            if isinstance(d, engine.Evict) and d.rule == engine_types.CONSOLIDATION and d.job_id in admits
        }
        admitted_now: set[str] = set()
        requeued_now = 0
        self._lock_jobs(result, moves)
        # Evictions and shrinks first: an admission in the same result may stand on their GPUs.
        for decision in result.decisions:
            if isinstance(decision, engine.Evict) and decision.job_id not in moves:
                requeued_now += self._evict(decision)
            elif isinstance(decision, engine.Shrink):
                self._shrink(decision)
        self._flush_evictions()
        if self.drained_to_queue:
            # A drained job is placed by a cycle that sees it pending: ask for one, as the
            # executor does when a grace period ends.
            triggers.request_cycle_on_commit("drain")
        self._load_occupancy(result, moves)
        # Moves first, each once the devices it goes to are free: the engine may list a move onto
        # devices that a later move in the same result vacates (a chain of consolidations).
        waiting = [d for d in result.decisions if isinstance(d, engine.Admit) and d.job_id in moves]
        while waiting:
            ready = [d for d in waiting if self._move_fits(d)]
            for decision in ready or waiting:  # none fits: apply them in order, to log and skip
                self._move(decision, result)
            waiting = [d for d in waiting if d not in ready] if ready else []
        for decision in result.decisions:
            if isinstance(decision, engine.Admit):
                if decision.job_id in moves:
                    continue
                elif self._admit(decision):
                    admitted_now.add(decision.job_id)
            elif isinstance(decision, engine.Grow):
                self._grow(decision)
        self._flush_admissions()
        self._write_reasons(result, admitted_now)
        # Every job admitted now was seen pending (`_admit`); counted in C, the jobs being 10,000 or more.
        still_pending = countOf(map(_state_of, self.index.jobs.values()), JobState.PENDING.value) - len(admitted_now)
        self.applied.pending = still_pending + requeued_now
        return self.applied

    # --- decisions ---------------------------------------------------------------------------------

    def _evict(self, decision: engine.Evict) -> int:
        """Returns 1 when the job went straight back to the queue (no grace period).

        Checked here against the locked row; written by `_flush_evictions`."""
        seen = self._seen(decision.job_id, JobState.RUNNING)
        if seen is None:
            return 0
        if self.current.get(seen.pk) != (JobState.RUNNING, seen.revision):
            self.applied.skipped += 1
            return 0
        beneficiary_pk, beneficiary_name = self._beneficiary(decision.beneficiary)
        self.new_events.append(
            (seen.pk, JobEventKind.EVICTED.value, self.now, decision.rule, beneficiary_pk, decision.reason)
        )
        self.applied.evicted += 1
        self.applied.evicted_ids.append(seen.pk)
        self.applied.decisions.append(
            {
                "kind": "evict",
                "job": seen.name,
                "job_id": seen.pk,
                "rule": decision.rule,
                "beneficiary": beneficiary_name,
                "reason": decision.reason,
                "grace_seconds": seen.grace_seconds,
            }
        )
        if seen.grace_seconds > 0:
            release_at = self.now + timedelta(seconds=seen.grace_seconds)
            self.releasing_rows.append((seen.pk, seen.revision, release_at, beneficiary_pk))
            self.current[seen.pk] = (JobState.RELEASING, seen.revision + 1)
            return 0
        # No grace period: the GPUs are free in this very commit. The job's reason and event name
        # no other job: whoever may read this job need not see the one it made room for, and the
        # event's beneficiary column names that one as each reader may learn of it.
        message = f"evicted by {decision.rule}"
        values = released_values(requeue=seen.requeue, now=self.now, message=message)
        # Requeued, the victim stays promised to its beneficiary until that job starts (cleared by
        # the admissions of this commit when it starts now), as a victim released after its grace
        # does: else, while the beneficiary waits for another victim, it could take its GPUs back
        # and be evicted again for the same job (SCHEDULING.md §5, no ping-pong).
        promised = (
            beneficiary_pk
            if values["state"] == JobState.PENDING and decision.rule != engine_types.CONSOLIDATION
            else None
        )
        self.released_rows.append(
            (
                seen.pk,
                seen.revision,
                values["state"],
                values["finished_at"],
                values["reason_code"],
                values["reason_message"],
                promised,
            )
        )
        kind, event_message = released_event(requeue=seen.requeue, message=message)
        self.new_events.append((seen.pk, str(kind), self.now, "", beneficiary_pk, event_message))
        self.current[seen.pk] = (str(values["state"]), seen.revision + 2)
        if decision.rule == engine_types.DRAIN and values["state"] == JobState.PENDING:
            self.drained_to_queue = True
        return 1 if values["state"] == JobState.PENDING else 0

    def _shrink(self, decision: engine.Shrink) -> None:
        seen = self._seen(decision.job_id, JobState.RUNNING)
        remove = self._placements(decision.remove)
        if seen is None or remove is None:
            return
        records = list(
            ReplicaPlacementRecord.objects.filter(job_id=seen.pk).values("id", "node_id", "devices", "fraction")
        )
        doomed: list[int] = []
        for node_id, devices, fraction in remove:
            match = next(
                (
                    r
                    for r in records
                    if r["id"] not in doomed
                    and r["node_id"] == node_id
                    and tuple(r["devices"]) == devices
                    and abs(r["fraction"] - fraction) < _EPSILON
                ),
                None,
            )
            if match is None:
                self.applied.skipped += 1
                return
            doomed.append(match["id"])
        if len(doomed) >= len(records):
            self.applied.skipped += 1  # A shrink never takes the last replica; that is an eviction.
            return
        removed_gpus = _gpus_of(remove)
        changed = Job.objects.filter(pk=seen.pk, state=JobState.RUNNING, revision=seen.revision).update(
            revision=F("revision") + 1,
            allocated_gpus=F("allocated_gpus") - removed_gpus,
            running_replicas=F("running_replicas") - len(doomed),
        )
        if not changed:
            self.applied.skipped += 1
            return
        ReplicaPlacementRecord.objects.filter(pk__in=doomed).delete()
        beneficiary_pk, beneficiary_name = self._beneficiary(decision.beneficiary)
        add_event(
            job_id=seen.pk,
            kind=JobEventKind.SHRUNK,
            at=self.now,
            rule=decision.rule,
            beneficiary_id=beneficiary_pk,
            message=decision.reason or f"gave up {len(doomed)} replica(s), {readable(removed_gpus)} GPUs",
        )
        self.applied.decisions.append(
            {
                "kind": "shrink",
                "job": seen.name,
                "job_id": seen.pk,
                "rule": decision.rule,
                "beneficiary": beneficiary_name,
                "replicas": len(doomed),
                "gpus": removed_gpus,
                "reason": decision.reason,
            }
        )

    def _admit(self, decision: engine.Admit) -> bool:
        seen = self._seen(decision.job_id, JobState.PENDING)
        placements = self._placements(decision.placements)
        if seen is None or placements is None or not placements:
            if seen is not None:
                self.applied.skipped += 1
            return False
        conflict = self._conflict(placements)
        if conflict is not None:
            logger.error("admission of %s skipped: %s", seen.name, conflict)
            self.applied.skipped += 1
            return False
        if self.current.get(seen.pk) != (JobState.PENDING, seen.revision):
            self.applied.skipped += 1  # Cancelled (or otherwise changed) since the snapshot.
            return False
        gpus = _gpus_of(placements)
        self.current[seen.pk] = (JobState.RUNNING, seen.revision + 1)
        self.admit_rows.append((seen.pk, seen.revision, gpus, len(placements)))
        self.new_placements.extend(
            (seen.pk, node_id, list(devices), fraction) for node_id, devices, fraction in placements
        )
        self._occupy(seen.pk, placements, sign=1)
        nodes = self._nodes(placements)
        self.new_events.append(
            (
                seen.pk,
                JobEventKind.ADMITTED.value,
                self.now,
                "",
                None,
                f"{len(placements)} replica(s), {readable(gpus)} GPUs on {', '.join(nodes)}",
            )
        )
        self.applied.admitted += 1
        self.applied.admitted_ids.append(seen.pk)
        self.applied.decisions.append(
            {
                "kind": "admit",
                "job": seen.name,
                "job_id": seen.pk,
                "gpus": gpus,
                "replicas": len(placements),
                "nodes": nodes,
            }
        )
        return True

    def _move_fits(self, decision: engine.Admit) -> bool:
        seen = self.index.jobs.get(decision.job_id)
        placements = self._placements(decision.placements)
        if seen is None or placements is None:
            return True  # `_move` skips it
        old = self.held.get(seen.pk, [])
        self._occupy(seen.pk, old, sign=-1)
        fits = self._conflict(placements) is None
        for node_id, devices, fraction in old:  # put back without adding to `held` twice
            share = fraction if fraction < 1 else 1.0
            for device in devices:
                self.used[(node_id, device)] += share
        return fits

    def _move(self, decision: engine.Admit, result: engine.CycleResult) -> None:
        """Consolidation: a running job restarts elsewhere in the same commit."""
        seen = self._seen(decision.job_id, JobState.RUNNING)
        placements = self._placements(decision.placements)
        if seen is None or placements is None:
            return
        old = self.held.pop(seen.pk, [])
        self._occupy(seen.pk, old, sign=-1)
        conflict = self._conflict(placements)
        if conflict is not None:
            logger.error("move of %s skipped: %s", seen.name, conflict)
            self._occupy(seen.pk, old, sign=1)
            self.applied.skipped += 1
            return
        gpus = _gpus_of(placements)
        changed = Job.objects.filter(pk=seen.pk, state=JobState.RUNNING, revision=seen.revision).update(
            revision=F("revision") + 1, allocated_gpus=gpus, running_replicas=len(placements), started_at=self.now
        )
        if not changed:
            self._occupy(seen.pk, old, sign=1)
            self.applied.skipped += 1
            return
        ReplicaPlacementRecord.objects.filter(job_id=seen.pk).delete()
        self._create_placements(seen.pk, placements)
        self._occupy(seen.pk, placements, sign=1)
        evict = next((d for d in result.decisions if isinstance(d, engine.Evict) and d.job_id == decision.job_id), None)
        beneficiary_pk, beneficiary_name = self._beneficiary(evict.beneficiary if evict else None)
        nodes = self._nodes(placements)
        add_event(
            job_id=seen.pk,
            kind=JobEventKind.MOVED,
            at=self.now,
            rule=engine_types.CONSOLIDATION,
            beneficiary_id=beneficiary_pk,
            message=f"restarted on {', '.join(nodes)}"
            + (f" to make room for {beneficiary_name}" if beneficiary_name else ""),
        )
        self.applied.decisions.append(
            {
                "kind": "move",
                "job": seen.name,
                "job_id": seen.pk,
                "rule": engine_types.CONSOLIDATION,
                "beneficiary": beneficiary_name,
                "nodes": nodes,
            }
        )

    def _grow(self, decision: engine.Grow) -> None:
        seen = self._seen(decision.job_id, JobState.RUNNING)
        placements = self._placements(decision.add)
        if seen is None or placements is None or not placements:
            return
        conflict = self._conflict(placements)
        if conflict is not None:
            logger.error("growth of %s skipped: %s", seen.name, conflict)
            self.applied.skipped += 1
            return
        gpus = _gpus_of(placements)
        changed = Job.objects.filter(pk=seen.pk, state=JobState.RUNNING, revision=seen.revision).update(
            revision=F("revision") + 1,
            allocated_gpus=F("allocated_gpus") + gpus,
            running_replicas=F("running_replicas") + len(placements),
        )
        if not changed:
            self.applied.skipped += 1
            return
        self._create_placements(seen.pk, placements)
        self._occupy(seen.pk, placements, sign=1)
        nodes = self._nodes(placements)
        add_event(
            job_id=seen.pk,
            kind=JobEventKind.GROWN,
            at=self.now,
            message=f"+{len(placements)} replica(s), {readable(gpus)} GPUs on {', '.join(nodes)}",
        )
        self.applied.decisions.append(
            {
                "kind": "grow",
                "job": seen.name,
                "job_id": seen.pk,
                "replicas": len(placements),
                "gpus": gpus,
                "nodes": nodes,
            }
        )
