"""Reserve: the gang at the head of a quota's queue that does not fit keeps the GPUs where it
will fit soonest, so that the small jobs behind it cannot take them again and again (Slurm
backfill's answer to large jobs that starve; docs/scheduling.md, "Reservations").

Allocate calls in here at two points, and reclaim and explain at one each:

- `hold`: a job that does not fit, the first such job of its quota this cycle, gets a
  reservation: the nodes where its whole gang fits soonest, judged from the expected ends of the
  jobs running there (`Job.duration`; unknown ends last); of those nodes' devices, the ones free
  now are taken out of the pool. It never holds more than the gang asks, fractional jobs get
  none, and at most `bounds.MAX_RESERVATIONS` are made per cycle.
- `backfill`: a later job that found no room may still use reserved GPUs when it cannot delay
  the reservation: it asks fewer GPUs than the reserved job and, by its own known duration, ends
  before the reservation's expected start. A job of unknown duration uses only GPUs outside.
  And a reservation never keeps a quota from its guarantee: a job more entitled than the reserved
  one (within its guarantee, or within its fair share, where the reserved job is not) may use its
  GPUs, if of another quota, or of the same one within the guarantee (SCHEDULING.md §5); so may
  its victim search (`search_with_hold`), which also counts the job's own reservation as free.
- `explainer`: the reserved job says where and when ("reserved: gpu-3 and gpu-4 free in about
  40 s"); a job kept off reserved GPUs gets `behind_reservation`.

Nothing is stored between cycles: each cycle computes its reservations again from its snapshot,
so a reservation ends as soon as its job starts or leaves the queue, and follows the nodes as
their jobs end.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduling.engine import bounds
from scheduling.engine.cluster import Placement
from scheduling.engine.fairshare import MILLI
from scheduling.engine.policies import gpu_count, gpus
from scheduling.engine.reservations import UNKNOWN, Hold, Reservations, pending_with_duration
from scheduling.engine.session import Session
from scheduling.engine.types import BEHIND_RESERVATION, INSUFFICIENT_CAPACITY, NO_FIT, RELEASING, RUNNING


def reservations(session: Session) -> Reservations:
    found = session.reservations
    if found is None:
        found = session.reservations = Reservations()
    return found


def hold(session: Session, job: int) -> None:
    """Reserve for an entitled job that found no room, if its quota has no reservation yet."""
    res = reservations(session)
    leaf = session.job_leaf[job]
    replica = session.replica_milli[job]
    if leaf in res.leaves or replica < MILLI or session.promised[job]:
        return
    res.leaves.add(leaf)  # its head had its turn, with a reservation or without
    if session.cluster.free_total == 0:
        return  # nothing free to keep: the next cycle looks again (in a full pool, at no cost)
    if len(res.holds) >= bounds.share_of(bounds.MAX_RESERVATIONS, session.snapshot.bound_share):
        return
    update_ends(session, res)
    found = soonest_fit(session, res, job) if res.known_ends else emptiest_nodes(session, res, job)
    if found is None:
        return
    start, replicas = found
    cluster = session.cluster
    devices: list[Placement] = []
    for node, chosen in replicas:
        for d in chosen:
            if cluster.dev_free[node][d] >= MILLI:
                devices.append((node, (d,), MILLI))
    for pl in devices:
        cluster.adjust(pl, -1, 0.0, 0.0)
        res.held.add((pl[0], pl[1][0]))
        res.ends[pl[0]][pl[1][0]] = None  # kept for this gang: free to no other reservation
    nodes = tuple(sorted({node for node, _ in replicas}))
    level = entitlement(session, job)
    res.holds[job] = Hold(job, devices, nodes, start, level, leaf)
    res.top_level = max(res.top_level, level)
    res.changed()


GUARANTEED, FAIR_SHARE, BORROWER = 0, 1, 2


def entitlement(session: Session, job: int) -> int:
    """With the job admitted: its own quota (the tree's leaf: a quota without children, or a
    parent's "self") within its guarantee (0), within its fair share (1), or above it (2: a
    borrower). Lower is stronger.

    Only the leaf is asked. What children hold within their guarantees (fair shares) adds up to at
    most their parent's, so an ancestor above is so because of a borrower somewhere under it,
    whom a reclaim takes back first (the guarantee at every level, SCHEDULING.md §3). Judged by its
    ancestors, a job within its quota's guarantee looked like a borrower whenever a borrower sat
    above it, and a borrower's reservation then kept it waiting for ever."""
    leaf = session.job_leaf[job]
    after = session.allocated[leaf] + session.needs[job]
    if after <= session.tree.admit_guaranteed[leaf]:
        return GUARANTEED
    if after <= session.fair_share[leaf]:
        return FAIR_SHARE
    return BORROWER


def open_to(session: Session, level: int) -> bool:
    """Whether a job of this entitlement may find GPUs on reservations when none is free: some
    reservation is less entitled (`usable`), or a pending job has a known duration (it may end
    before a reservation starts). The actions stop looking once nothing is free and this is not
    so, as they did before reservations."""
    res = session.reservations
    if res is None or not res.held:
        return False
    if res.pending_durations is None:
        res.pending_durations = pending_with_duration(session.jobs, session.state)
    if res.pending_durations:
        return True
    # no hold is less entitled than `level` (always so for a borrower): none to look through
    return res.less_entitled(level)


def hold_head(session: Session, job: int) -> None:
    """`hold` for the head of a quota's queue passed over until the borrowers' pass, even where
    it fits now: the jobs behind it in its own quota would otherwise take those GPUs first, as
    entitled jobs, again and again. Only those within the guarantee still may (`usable`). It
    uses its own reservation in that pass (`backfill`)."""
    hold(session, job)


def update_ends(session: Session, res: Reservations) -> None:
    """When each busy device frees: the latest expected end of the jobs on it."""
    if res.decisions_seen < 0:
        res.ends = [[None] * g for g in session.cluster.gpus]
        # The jobs the snapshot holds placed: those admitted since are in the decisions, below.
        for job in session.placed:
            now_state = session.state[job]
            if now_state == RUNNING:
                note_ends(session, res, job, session.placements[job])
            elif now_state == RELEASING:
                # promised to the job it was evicted for, which then holds it for its own time
                for node, devices, _ in session.held[job]:
                    for d in devices:
                        res.ends[node][d] = UNKNOWN
        res.decisions_seen = 0
    decisions = session.decisions
    for entry in decisions[res.decisions_seen :]:
        if isinstance(entry, tuple) and entry[0] == "admit":
            note_ends(session, res, entry[1], session.placements[entry[1]])
    res.decisions_seen = len(decisions)


def note_ends(session: Session, res: Reservations, job: int, placements: tuple[Placement, ...]) -> None:
    spec = session.jobs[job]
    if spec.duration is None:
        end = UNKNOWN
    else:
        started = session.now if session.admitted_now[job] or spec.started_at is None else spec.started_at
        end = max(session.now, started + spec.duration)
        res.known_ends = True
    ends = res.ends
    for node, devices, _ in placements:
        row = ends[node]
        for d in devices:
            if 0 <= d < len(row) and (row[d] or -1.0) < end:
                row[d] = end


Replicas = list[tuple[int, list[int]]]  # (node, its devices) per replica of the gang


def frees_at(now: float, free: list[int], row: list[float | None]) -> list[tuple[float, int]]:
    """(when it frees, device) for the devices of one node that free at a known or unknown time."""
    out: list[tuple[float, int]] = []
    for d, milli in enumerate(free):
        if milli >= MILLI:
            out.append((now, d))
        else:
            end = row[d]
            if end is not None:
                out.append((end, d))
    out.sort()
    return out


def soonest_fit(session: Session, res: Reservations, job: int) -> tuple[float, Replicas] | None:
    """The earliest time the whole gang fits, and where: on each node, a replica is ready when
    its `width`-th device (in order of when they free) is; the gang takes the earliest replicas."""
    cluster = session.cluster
    width = session.replica_milli[job] // MILLI
    count = session.admit_count[job]
    now = session.now
    ready = cluster.ready
    ends = res.ends
    replicas_at: list[tuple[float, int]] = []
    for node, free in enumerate(cluster.dev_free):
        if not ready[node] or len(free) < width or not could_hold(session, node, job):
            continue
        order = frees_at(now, free, ends[node])
        replicas_at.extend((order[k][0], node) for k in range(width - 1, len(order), width))
    if len(replicas_at) < count:
        return None
    replicas_at.sort()
    chosen = replicas_at[:count]
    per_node: dict[int, int] = {}
    for _, node in chosen:
        per_node[node] = per_node.get(node, 0) + 1
    replicas: Replicas = []
    for node, many in per_node.items():
        devices = [d for _, d in frees_at(now, cluster.dev_free[node], ends[node])[: many * width]]
        replicas.extend((node, devices[k * width : (k + 1) * width]) for k in range(many))
    return chosen[-1][0], replicas


def could_hold(session: Session, node: int, job: int) -> bool:
    """The node has the cores and memory of one replica once empty (0: not tracked): a node
    too small for them is never reserved, however soon its GPUs free."""
    spec, size = session.jobs[job], session.snapshot.nodes[node]
    return (size.cpu <= 0 or size.cpu >= spec.cpu) and (size.memory_gib <= 0 or size.memory_gib >= spec.memory_gib)


def emptiest_nodes(session: Session, res: Reservations, job: int) -> tuple[float, Replicas] | None:
    """No running job has an expected end: the nodes with the most free devices, whose holders'
    ends are unknown (the bucket index, so that a pool of thousands of nodes costs a few peeks)."""
    cluster = session.cluster
    width = session.replica_milli[job] // MILLI
    count = session.admit_count[job]
    replicas: Replicas = []
    seen: set[int] = set()
    for level in range(cluster.max_gpus, 0, -1):
        for node in sorted(set(cluster.buckets[level])):
            if node in seen or cluster.whole[node] != level or cluster.gpus[node] < width:
                continue
            if not could_hold(session, node, job):
                continue
            seen.add(node)
            free = [d for d, milli in enumerate(cluster.dev_free[node]) if milli >= MILLI]
            row = res.ends[node]
            waiting = [d for d, milli in enumerate(cluster.dev_free[node]) if milli < MILLI and row[d] is not None]
            devices = free + waiting
            while len(devices) >= width and len(replicas) < count:
                replicas.append((node, devices[:width]))
                devices = devices[width:]
            if len(replicas) == count:
                return UNKNOWN, replicas
    return None


def holds_own(session: Session, job: int) -> bool:
    """Whether the job keeps GPUs in a reservation of its own (it is placed there first)."""
    res = session.reservations
    kept = None if res is None else res.holds.get(job)
    return kept is not None and bool(kept.devices)


def backfill(session: Session, job: int) -> list[Placement] | None:
    """Place a job that found no room on GPUs of reservations it may use: its own, or those it
    cannot delay (see the module); None if there are none or it still does not fit."""
    res = session.reservations
    if res is None or not res.held or session.cluster.free_total + len(res.held) * MILLI < session.needs[job]:
        return None  # the common case: no reservation, or too few GPUs even with every one
    spec = session.jobs[job]
    own = res.holds.get(job)
    level = entitlement(session, job)
    if (own is None or not own.devices) and spec.duration is None and level >= res.top_level:
        return None  # the common case: nothing it may use
    leaf = session.job_leaf[job]
    replica = session.replica_milli[job]
    count = session.admit_count[job]
    duration = UNKNOWN if spec.duration is None else spec.duration
    failed = (leaf, level, replica, count, duration)
    if own is None:
        for f_leaf, f_level, f_replica, f_count, f_duration in res.failed_backfill:
            if (
                f_leaf == leaf
                and f_level <= level
                and f_replica <= replica
                and f_count <= count
                and f_duration <= duration
            ):
                return None  # one no bigger, no longer and no less entitled found nothing this cycle
    if not room_for(session, job):
        res.failed_backfill.append(failed)
        return None
    placed: list[list[Placement] | None] = [None]

    def attempt() -> bool:
        placed[0] = session.place_gang(job, count)
        return placed[0] is not None

    if not with_reservations(session, job, attempt):
        res.failed_backfill.append(failed)
    return placed[0]


def usable(session: Session, job: int) -> list[Hold]:
    """The reservations whose GPUs the job may take: its own, and those it cannot delay (see
    the module): one whose job is less entitled, passed by a job of another quota, or by one
    behind it in its own quota only within the guarantee (§5); or any, by a job known to end
    before the reservation starts and asking fewer GPUs than its job."""
    res = session.reservations
    if res is None or not res.held:
        return []
    # One loop, the job's figures read once: every victim search asks (800 a cycle when
    # simulate's S3 fills up), over up to MAX_RESERVATIONS reservations.
    level = entitlement(session, job)
    leaf = session.job_leaf[job]
    needs = session.needs
    need = needs[job]
    duration = session.jobs[job].duration
    ends = None if duration is None else session.now + duration
    found = []
    for kept in res.holds.values():
        if not kept.devices:
            continue
        if (
            kept.job == job
            or (level < kept.level and (level == GUARANTEED or kept.leaf != leaf))
            or (ends is not None and ends <= kept.start and need < needs[kept.job])
        ):
            found.append(kept)
    return found


def room_for(session: Session, job: int) -> bool:
    """Whether the free GPUs and those of the reservations the job may take add up to its need."""
    need = session.needs[job]
    free = session.cluster.free_total
    if free >= need:
        return True
    res = session.reservations
    if res is None or free + len(res.held) * MILLI < need:
        return False
    return free + sum(len(kept.devices) for kept in usable(session, job)) * MILLI >= need


def with_reservations(session: Session, job: int, attempt: Callable[[], bool]) -> bool:
    """Run a placement attempt for the job (a victim search, a consolidation) with the GPUs of
    the reservations it may use counted as free. On success its own reservation ends and the
    others keep whatever the attempt left free; on failure everything is as before."""
    released = usable(session, job)
    if not released:
        return attempt()
    journal = session.journal
    mark = journal.checkpoint()
    cluster = session.cluster
    for kept in released:
        for pl in kept.devices:
            cluster.adjust(pl, +1, 0.0, 0.0)
    if not attempt():
        journal.rollback(mark)
        return False
    res = session.reservations
    assert res is not None  # usable() found some
    for kept in released:
        still = [] if kept.job == job else [pl for pl in kept.devices if cluster.dev_free[pl[0]][pl[1][0]] >= MILLI]
        for pl in still:
            cluster.adjust(pl, -1, 0.0, 0.0)
        for pl in kept.devices:
            if pl not in still:
                res.held.discard((pl[0], pl[1][0]))
        kept.devices = still
    res.changed()
    return True


def search_with_hold(
    session: Session, job: int, search: Callable[[Session, int], tuple[bool, int]]
) -> tuple[bool, int]:
    """A victim search with the reservations the job may use counted as free."""
    examined = [0]

    def attempt() -> bool:
        found, examined[0] = search(session, job)
        return found

    return with_reservations(session, job, attempt), examined[0]


def explainer(session: Session, free: int) -> Callable[[int], tuple[str, str] | None] | None:
    """The reason of a job still pending for capacity when reservations exist, or None, as a
    function of the job (None: no reservation this cycle). What it reads of the reservations is
    the same for every job of the cycle's final state, so it is read once: a full pool explains
    100,000 jobs behind a few reservations."""
    res = session.reservations
    if res is None or not res.holds:
        return None
    holds = res.holds
    reserved = len(res.held) * MILLI
    needs = session.needs
    jobs = session.jobs
    # one sentence per job shape: (GPUs, duration) -> the reason
    behind: dict[tuple[int, float | None], tuple[str, str]] = {}
    first: list[Hold] = []  # the first reservation holding GPUs, once asked for

    def explained(job: int) -> tuple[str, str] | None:
        kept = holds.get(job)
        if kept is not None:
            own = free + len(kept.devices) * MILLI
            return (NO_FIT if needs[job] <= own else INSUFFICIENT_CAPACITY), reserved_sentence(session, kept)
        need = needs[job]
        if reserved == 0 or need > free + reserved:
            return None
        shape = (need, jobs[job].duration)
        found = behind.get(shape)
        if found is None:
            if not first:
                first.append(next(other for other in holds.values() if other.devices))
            found = behind[shape] = (BEHIND_RESERVATION, behind_sentence(session, job, first[0], reserved, free))
        return found

    return explained


def node_list(session: Session, nodes: tuple[int, ...]) -> str:
    names = [session.cluster.names[node] for node in nodes]
    if len(names) > 3:
        return f"{', '.join(names[:3])} and {len(names) - 3} more node(s)"
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def when(session: Session, start: float) -> str:
    if start == UNKNOWN:
        return "when their jobs end (no expected end is known)"
    seconds = max(0.0, start - session.now)
    return f"in about {seconds:.1f} s" if seconds < 10 else f"in about {seconds:,.0f} s"


def reserved_sentence(session: Session, kept: Hold) -> str:
    held = len(kept.devices)
    need = session.needs[kept.job]
    return (
        f"reserved: {node_list(session, kept.nodes)} free {when(session, kept.start)}; "
        f"{held} of the {gpu_count(need)} it needs are free now and kept for it"
    )


def behind_sentence(session: Session, job: int, kept: Hold, reserved: int, free: int) -> str:
    spec = session.jobs[job]
    other = session.jobs[kept.job]
    if spec.duration is None:
        why = "its run time is unknown, so it could delay that start"
    elif session.needs[job] >= session.needs[kept.job]:
        why = f"it asks as many GPUs as {other.id} or more"
    else:
        why = f"it would run past that start ({spec.duration:,.1f} s)"
    return (
        f"needs {gpu_count(session.needs[job])}; {gpus(free)} are free and {gpus(reserved)} reserved: "
        f"{node_list(session, kept.nodes)} for {other.id} of {other.quota}, which starts there "
        f"{when(session, kept.start)}; {why}"
    )
