"""Pending reasons: SCHEDULING.md §5, "Explained": every pending job carries a stable reason
code, a sentence with the numbers, and its position in its quota's queue.

Reasons are recorded by the actions as they refuse a job; capacity refusals are re-explained
here from the final state of the cycle (what is free after every action ran).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scheduling.engine.actions import reserve
from scheduling.engine.fairshare import MILLI
from scheduling.engine.policies import gpu_count, gpus, queue_key
from scheduling.engine.resources import LABEL, UNIT
from scheduling.engine.session import Session
from scheduling.engine.types import (
    EXCEEDS_CLUSTER,
    GUARANTEED_ONLY,
    INSUFFICIENT_CAPACITY,
    NO_FIT,
    PENDING,
    QUEUE_BLOCKED,
    QUOTA_LIMIT,
    UNKNOWN_QUOTA,
    WAITING_FOR_EVICTION,
    PendingReason,
    new_pending_reason,
)

# Capacity-type failures are re-explained from the final state of the cycle.
_CAPACITY_CODES = (NO_FIT, INSUFFICIENT_CAPACITY)


def pending_reasons(session: Session) -> dict[str, PendingReason]:
    jobs = session.jobs
    state = session.state
    job_leaf = session.job_leaf
    # Allocation already sorted each quota's queue; only this cycle's victims join them (and are
    # sorted in), and the jobs of no known quota come after, in snapshot order.
    late = [job for job in session.placed if state[job] == PENDING]
    if -1 in job_leaf:
        late.extend(job for job in session.queued if job_leaf[job] < 0 and state[job] == PENDING)
        late.sort()
    joining: dict[int, list[int]] = {}
    rejoined: set[int] = set()
    for job in late:
        joining.setdefault(job_leaf[job], []).append(job)
        if jobs[job].state != PENDING:
            rejoined.add(job_leaf[job])
    # Each pending job's place in its quota's queue; then the reasons, in snapshot order: the
    # jobs' figures are read in the order they lie in memory (at S4, three times faster than
    # reading 100,000 jobs in queue order, which jumps about the heap for each).
    position_of = [0] * len(jobs)
    for members in _queues(session, joining, rejoined):
        position = 0
        for job in members:
            if state[job] == PENDING:  # else admitted this cycle (allocate's queues hold every job)
                position += 1
                position_of[job] = position
    out: dict[str, PendingReason] = {}
    free = session.cluster.free_total
    largest = session.cluster.largest_block()
    reasons = session.reasons
    needs = session.needs
    messages = session.messages
    replica = session.replica_milli
    behind = reserve.explainer(session, free)
    capacity_codes = _CAPACITY_CODES
    for job, position in enumerate(position_of):
        if not position:
            continue
        reason = reasons.get(job)
        if reason is not None and reason[0] in capacity_codes:
            # the common case, a full pool: one sentence per quota and job shape (no_fit
            # speaks of the nodes alone: one per shape)
            if behind is not None:
                held = behind(job)
                if held is not None:
                    out[jobs[job].id] = new_pending_reason(held[0], held[1], position)
                    continue
            code = NO_FIT if needs[job] <= free else INSUFFICIENT_CAPACITY
            spec = jobs[job]
            quota = -2 if code == NO_FIT else job_leaf[job]
            key = (code, (), quota, needs[job], replica[job], spec.cpu, spec.memory_gib)
            message = messages.get(key)
            if message is None:
                message = messages[key] = (
                    capacity_sentence(session, quota, needs[job], free)
                    if code == INSUFFICIENT_CAPACITY
                    else sentence(session, job, code, (), free, largest)
                )
            out[spec.id] = new_pending_reason(code, message, position)
            continue
        code, args = final_reason(session, job, free)
        out[jobs[job].id] = new_pending_reason(code, cached_sentence(session, job, code, args, free, largest), position)
    return out


def _queues(session: Session, joining: dict[int, list[int]], rejoined: set[int]) -> Iterator[list[int]]:
    """Each leaf's jobs in queue order: allocate's queues (with jobs admitted since), the victims
    of this cycle sorted into theirs, then the leaves only they or jobs of no known quota are in."""
    jobs = session.jobs
    state = session.state
    for leaf, queue in session.queues.items():
        joined = joining.pop(leaf, None)
        if joined is None:
            yield queue
            continue
        members = [job for job in queue if state[job] == PENDING] + joined
        members.sort(key=lambda job: queue_key(jobs[job], job))
        yield members
    for leaf, members in joining.items():
        if leaf in rejoined:
            members.sort(key=lambda job: queue_key(jobs[job], job))
        yield members


def final_reason(session: Session, job: int, free: int) -> tuple[str, tuple[Any, ...]]:
    reason = session.reasons.get(job)
    if reason is None:
        reason = session.static_refusal(job) or (
            (WAITING_FOR_EVICTION, ()) if session.promised[job] else (INSUFFICIENT_CAPACITY, ())
        )
    code = reason[0]
    if code in _CAPACITY_CODES:
        return ((NO_FIT if session.needs[job] <= free else INSUFFICIENT_CAPACITY), ())
    return reason


def cached_sentence(session: Session, job: int, code: str, args: tuple[Any, ...], free: int, largest: int) -> str:
    """Jobs of one quota with the same shape and refusal share one sentence."""
    if code in (QUEUE_BLOCKED, WAITING_FOR_EVICTION, UNKNOWN_QUOTA):
        return sentence(session, job, code, args, free, largest)
    key = (code, args, session.job_leaf[job], session.needs[job], session.replica_milli[job])
    message = session.messages.get(key)
    if message is None:
        message = session.messages[key] = sentence(session, job, code, args, free, largest)
    return message


def resource_sentence(code: str, args: tuple[Any, ...]) -> str:
    """A refusal by a managed resource, named first: "cpu: would exceed the limit of team-a:
    60 + 8 > 64 cores"."""
    resource = args[-1]
    label, unit = LABEL[resource], UNIT[resource]
    if code == EXCEEDS_CLUSTER:
        scope, asked, has, _ = args
        if scope == "node":
            return f"{label}: needs {gpus(asked)} {unit} on one node; the largest node has {gpus(has)} {unit}"
        return f"{label}: asks {gpus(asked)} {unit}, the pool has {gpus(has)} {unit}"
    name, allocated, asked, bound, _ = args
    figures = f"{gpus(allocated)} + {gpus(asked)} > {gpus(bound)} {unit}"
    if code == QUOTA_LIMIT:
        return f"{label}: would exceed the limit of {name}: {figures}"
    return f"{label}: non-preemptible jobs must fit in guaranteed quota of {name}: {figures}"


def node_fit_sentence(session: Session, job: int, shape: str) -> str:
    """A replica whose GPUs some node has free, but not its CPU or memory: say which stops it,
    with the most of it free on a node that has the GPUs."""
    spec = session.jobs[job]
    cpu, memory = most_free_beside(session, max(1, session.replica_milli[job] // MILLI))
    asks: list[str] = []
    short: list[str] = []
    if spec.cpu > 0:
        asks.append(f"{spec.cpu:g} cores")
        if cpu < spec.cpu:
            short.append(f"{max(cpu, 0):g} cores")
    if spec.memory_gib > 0:
        asks.append(f"{spec.memory_gib:g} GiB of memory")
        if memory < spec.memory_gib:
            short.append(f"{max(memory, 0):g} GiB of memory")
    needs = f"needs {shape} with {' and '.join(asks)}"
    if short:
        return f"{needs}; where the GPUs are free, the most free is {' and '.join(short)}"
    return f"{needs}; no node has the GPUs, CPU and memory free at once"


def most_free_beside(session: Session, devices: int) -> tuple[float, float]:
    """The most CPU and the most memory free on a node with `devices` whole GPUs free, once per
    size a cycle (the pool is in its final state when reasons are written)."""
    key = ("most free beside", devices)
    found = session.most_free.get(key)
    if found is None:
        cluster = session.cluster
        with_gpus = [n for n in range(len(cluster.names)) if cluster.ready[n] and cluster.whole[n] >= devices]
        cpu = max((cluster.cpu_free[n] for n in with_gpus), default=0.0)
        memory = max((cluster.mem_free[n] for n in with_gpus), default=0.0)
        found = session.most_free[key] = (cpu, memory)
    return found


def sentence(session: Session, job: int, code: str, args: tuple[Any, ...], free: int, largest: int) -> str:
    spec = session.jobs[job]
    replica = session.replica_milli[job]
    need = session.needs[job]
    count = session.admit_count[job]
    if code == UNKNOWN_QUOTA:
        return f"quota {spec.quota} does not exist"
    if len(args) == 5 or (code == EXCEEDS_CLUSTER and len(args) == 4):
        return resource_sentence(code, args)  # CPU or memory (engine.resources)
    if code == EXCEEDS_CLUSTER:
        scope, asked, has = args
        if scope == "node":
            return f"needs {gpu_count(asked)} on one node; the largest node has {gpus(has)}"
        return f"asks {gpu_count(asked)}, the pool has {gpus(has)}"
    if code == QUOTA_LIMIT:
        name, allocated, asked, limit = args
        return f"would exceed the limit of {name}: {gpus(allocated)} + {gpus(asked)} > {gpus(limit)}"
    if code == GUARANTEED_ONLY:
        name, allocated, asked, guaranteed = args
        return (
            f"non-preemptible jobs must fit in guaranteed quota of {name}: "
            f"{gpus(allocated)} + {gpus(asked)} > {gpus(guaranteed)}"
        )
    if code == QUEUE_BLOCKED and len(args) == 2:
        return f"waits while {args[0]}, which it was evicted for, starts"
    if code == QUEUE_BLOCKED:
        return f"{spec.quota} is a fifo queue: waits behind {args[0]}, which does not fit yet"
    if code == WAITING_FOR_EVICTION:
        victims = [session.jobs[v].id for v in session.waiting_for.get(job, [])]
        if victims:
            return (
                f"waiting for {len(victims)} evicted job(s) ({', '.join(sorted(victims))}) to "
                f"release their GPUs; {gpu_count(need)} are promised to it"
            )
        if args:
            return (
                f"waiting for {args[0]} evicted job(s) to release their GPUs; {gpu_count(args[1])} are promised to it"
            )
        return f"waiting for evicted jobs to release their GPUs; needs {gpu_count(need)}"
    if code != NO_FIT:
        return capacity_sentence(session, session.job_leaf[job], need, free)
    if replica < MILLI:
        best = session.cluster.largest_device_free()
        shape = f"{gpus(replica)} of one GPU" + (f" x {count:,} replicas" if count > 1 else "")
        return f"needs {shape}; the most free on one device is {gpus(best)}"
    shape = (
        f"{count:,} replicas of {gpu_count(replica)}, each on one node"
        if count > 1
        else f"{gpu_count(replica)} on one node"
    )
    if (spec.cpu > 0 or spec.memory_gib > 0) and replica // MILLI <= largest:
        return node_fit_sentence(session, job, shape)
    return f"needs {shape}; largest free block is {largest}"


def capacity_sentence(session: Session, leaf: int, need: int, free: int) -> str:
    """insufficient_capacity: the pool's free GPUs, and the quota's fair share where the job
    would go above it (the sentence most pending jobs of a full pool carry: one per quota and
    job size, so it is built without the shape that only no_fit quotes)."""
    allocated = session.allocated[leaf]
    share = session.fair_share[leaf]
    name = session.tree.names[leaf]
    if allocated + need > share:
        context = (
            f"{name} would go above its fair share ({gpus(allocated)} + {gpus(need)} > "
            f"{gpus(share)}), so it waits for idle GPUs"
        )
    else:
        context = "no preemptible job can be reclaimed or preempted for it"
    return f"needs {gpu_count(need)}; {gpus(free)} are free in the pool; {context}"
