"""Reads of the console: the sign-ins a user holds and the dashboard's numbers per role. The quota
charts are scheduling's (scheduling/quota_charts.py, allocation_history.py)."""

from __future__ import annotations

from typing import TypedDict

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.sessions.models import Session
from django.db.models import Count, Q, Sum
from django.utils import timezone

from quotas import selectors as quota_selectors
from quotas.hooks import QuotaStatus
from quotas.models import Node, NodeState, Quota
from scheduling.models import HOLDING_STATES, Job, JobState
from workspaces.models import Workspace
from workspaces.permissions import restrict


def session_keys_of(user: AbstractBaseUser) -> list[str]:
    """Keys of the user's live database sessions.

    Django stores the user id only inside the encoded session data, so this decodes every live
    session: linear in live sessions, which is fine for a console's few hundred users and runs only
    on sign-out-everywhere and deactivation. It assumes the default database session engine."""
    user_id = str(user.pk)
    keys = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator(chunk_size=500):
        if str(session.get_decoded().get("_auth_user_id", "")) == user_id:
            keys.append(session.session_key)
    return keys


# ---- The dashboard's numbers, one read per role, each a fixed number of queries. ----

DASHBOARD_QUOTAS_SHOWN = 20
# Topics the Dashboard follows at most (roots for an admin, workspaces for a member): with the
# quota rows' own, inside a socket's LIVE_MAX_SUBSCRIPTIONS (250).
DASHBOARD_TOPICS = 100


class ClusterFigures(TypedDict):
    """A platform admin's view: where the pool's GPUs are."""

    gpus_total: float
    gpus_in_use: float
    gpus_guaranteed: float
    gpus_idle: float
    nodes_total: int
    nodes_down: int
    nodes_cordoned: int
    jobs_pending: int


class QuotaUsage(TypedDict):
    quota: Quota
    status: QuotaStatus


class MemberFigures(TypedDict):
    """A member's view: their own jobs by state and the usage of the quotas they may use."""

    jobs_by_state: list[tuple[str, int]]
    jobs_total: int
    quotas: list[QuotaUsage]
    more_quotas: bool


def cluster_figures() -> ClusterFigures:
    """Three queries, whatever the size of the cluster. Idle is what ready nodes have that no job
    holds: GPUs on a node that is down are neither in use nor idle."""
    nodes = Node.objects.aggregate(
        all_gpus=Sum("gpus"),
        ready_gpus=Sum("gpus", filter=Q(state=NodeState.READY)),
        total=Count("id"),
        down=Count("id", filter=Q(state=NodeState.NOT_READY)),
        cordoned=Count("id", filter=Q(state__in=[NodeState.CORDONED, NodeState.DRAINING])),
    )
    jobs = Job.objects.aggregate(
        in_use=Sum("allocated_gpus", filter=Q(state__in=HOLDING_STATES)),
        pending=Count("id", filter=Q(state=JobState.PENDING)),
    )
    # Roots carry the guarantees of the whole tree (a child's guarantee is carved out of its parent's).
    guaranteed = Quota.objects.filter(parent__isnull=True).aggregate(guaranteed=Sum("gpus"))["guaranteed"]
    in_use = float(jobs["in_use"] or 0)
    return ClusterFigures(
        gpus_total=float(nodes["all_gpus"] or 0),
        gpus_in_use=in_use,
        gpus_guaranteed=float(guaranteed or 0),
        gpus_idle=max(float(nodes["ready_gpus"] or 0) - in_use, 0.0),
        nodes_total=int(nodes["total"]),
        nodes_down=int(nodes["down"]),
        nodes_cordoned=int(nodes["cordoned"]),
        jobs_pending=int(jobs["pending"] or 0),
    )


def member_jobs_by_state(user: AbstractBaseUser) -> list[tuple[str, int]]:
    """Jobs the user owns, counted by state, in one query: the Dashboard reads them again on
    every change of the user's workspaces (docs/live.md)."""
    counts = dict(
        Job.objects.filter(owner_id=user.pk).values_list("state").annotate(n=Count("id")).values_list("state", "n")
    )
    # In the lifecycle's order, so "Pending 2 · Running 1" reads the same on every visit.
    return [(label, int(counts[value])) for value, label in JobState.choices if counts.get(value)]


def member_figures(user: AbstractBaseUser) -> MemberFigures:
    """Jobs the user owns, counted by state, and the first quotas the user may use with their
    status: a fixed number of queries (the status provider reads a page of quotas at once)."""
    by_state = member_jobs_by_state(user)
    quotas = list(quota_selectors.quota_list(user=user)[: DASHBOARD_QUOTAS_SHOWN + 1])
    shown = quotas[:DASHBOARD_QUOTAS_SHOWN]
    statuses = quota_selectors.quota_statuses(shown)
    return MemberFigures(
        jobs_by_state=by_state,
        jobs_total=sum(count for _label, count in by_state),
        quotas=[QuotaUsage(quota=quota, status=statuses[quota.pk]) for quota in shown],
        more_quotas=len(quotas) > DASHBOARD_QUOTAS_SHOWN,
    )


def dashboard_topics(user: AbstractBaseUser) -> str:
    """The live topics the Dashboard follows, space-separated (docs/live.md). A platform admin's:
    `cluster` and the roots' quotas, as every job's change reaches its root quota's topic. A
    member's: the workspaces they see, whose changes re-read their jobs."""
    if getattr(user, "is_superuser", False):
        roots = Quota.objects.filter(parent__isnull=True).order_by("id").values_list("pk", flat=True)
        return " ".join(["cluster", *(f"quota:{pk}" for pk in roots[:DASHBOARD_TOPICS])])
    workspaces = restrict(Workspace.objects.all(), user, "view").order_by("id").values_list("pk", flat=True)
    return " ".join(f"workspace:{pk}" for pk in workspaces[:DASHBOARD_TOPICS])
