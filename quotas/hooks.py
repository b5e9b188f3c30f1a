"""Figures that a higher layer computes and the quotas app shows.

Imports point one way (scheduling → workspaces → quotas), yet a quota's `status` and a
dry-run `preview` come from the scheduler. The scheduling app registers its providers here
at start (`SchedulingConfig.ready`); until then the quotas app answers with what it has.
Higher apps may also register delete guards: a quota (or node) that something above still
depends on must not be deleted, and only that app knows what depends on it. Which quotas a
user may see is decided by the workspaces app (the quotas bound to their workspaces), which
registers its `restrict` here as the quota visibility.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypedDict

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from quotas.models import Node, Quota


class ResourceFigures(TypedDict):
    """A managed resource besides GPUs (cores or GiB): engine.ResourceStatus as the API shows it."""

    fair_share: float
    allocated: float
    guaranteed: float
    limit: float | None


class _GpuStatus(TypedDict):
    fair_share: float
    allocated: float
    allocated_self: float
    running: int
    pending: int


class QuotaStatus(_GpuStatus, total=False):
    # Only where the quota's pool manages the resource (SCHEDULING.md "Managed resources").
    # total=False rather than NotRequired: under postponed annotations Python 3.11 and the
    # schema generator read NotRequired keys as required.
    cpu: ResourceFigures
    memory_gib: ResourceFigures


class Preview(TypedDict):
    admit: list[dict[str, Any]]
    evict: list[dict[str, Any]]


StatusProvider = Callable[[list[Quota]], dict[int, QuotaStatus]]
PreviewProvider = Callable[[], Preview]
# A guard answers why the object may not be deleted, or None when nothing holds it.
QuotaDeleteGuard = Callable[[Quota], str | None]
NodeDeleteGuard = Callable[[Node], str | None]
# Why a node cannot move to another pool (the jobs placed on it, by name), or None.
NodeMoveGuard = Callable[[Node], str | None]
# (node, its new number of GPUs): why devices at that index and above must stay, or None.
NodeShrinkGuard = Callable[[Node, int], str | None]
# Waits for the scheduler's commit in flight and holds the next back (scheduling.providers).
CommitTurn = Callable[[], None]
# Records, in the writer's transaction, that something the scheduler reads changed (why, e.g.
# "quota.scale"): the beat's cycle runs only after such a change (scheduling.changes).
ChangeRecorder = Callable[[str], None]
# Narrows a queryset of quotas to those the user may see.
QuotaVisibility = Callable[[QuerySet[Quota], AbstractBaseUser | AnonymousUser | None], QuerySet[Quota]]


def _signed_in_see_all(quotas: QuerySet[Quota], user: AbstractBaseUser | AnonymousUser | None) -> QuerySet[Quota]:
    """Before any workspace rules exist: signed-in users read the tree, anonymous users nothing."""
    return quotas if user is not None and user.is_authenticated else quotas.none()


_quota_visibility: QuotaVisibility = _signed_in_see_all


def register_quota_visibility(visibility: QuotaVisibility) -> QuotaVisibility:
    """Install the rule for who sees which quota; returns the one it replaces (tests put it back)."""
    global _quota_visibility
    previous, _quota_visibility = _quota_visibility, visibility
    return previous


def restrict_quotas(quotas: QuerySet[Quota], user: AbstractBaseUser | AnonymousUser | None) -> QuerySet[Quota]:
    return _quota_visibility(quotas, user)


_status_provider: StatusProvider | None = None
_preview_provider: PreviewProvider | None = None
_quota_delete_guards: list[QuotaDeleteGuard] = []
_node_delete_guards: list[NodeDeleteGuard] = []
_node_shrink_guards: list[NodeShrinkGuard] = []
_node_move_guards: list[NodeMoveGuard] = []
_commit_turn: CommitTurn | None = None


def register_status_provider(provider: StatusProvider | None) -> StatusProvider | None:
    """Returns the provider it replaces, so a test can put it back; None restores the built-in zeros."""
    global _status_provider
    previous, _status_provider = _status_provider, provider
    return previous


def register_preview_provider(provider: PreviewProvider | None) -> PreviewProvider | None:
    global _preview_provider
    previous, _preview_provider = _preview_provider, provider
    return previous


def register_quota_delete_guard(guard: QuotaDeleteGuard) -> None:
    """Idempotent, so an app's `ready()` running twice does not double the checks."""
    if guard not in _quota_delete_guards:
        _quota_delete_guards.append(guard)


def unregister_quota_delete_guard(guard: QuotaDeleteGuard) -> None:
    if guard in _quota_delete_guards:
        _quota_delete_guards.remove(guard)


def register_node_delete_guard(guard: NodeDeleteGuard) -> None:
    if guard not in _node_delete_guards:
        _node_delete_guards.append(guard)


def unregister_node_delete_guard(guard: NodeDeleteGuard) -> None:
    if guard in _node_delete_guards:
        _node_delete_guards.remove(guard)


def register_node_move_guard(guard: NodeMoveGuard) -> None:
    if guard not in _node_move_guards:
        _node_move_guards.append(guard)


def register_node_shrink_guard(guard: NodeShrinkGuard) -> None:
    if guard not in _node_shrink_guards:
        _node_shrink_guards.append(guard)


def register_commit_turn(turn: CommitTurn) -> None:
    global _commit_turn
    _commit_turn = turn


_change_recorder: ChangeRecorder | None = None


def register_change_recorder(recorder: ChangeRecorder) -> None:
    global _change_recorder
    _change_recorder = recorder


def record_change(reason: str) -> None:
    """Called inside the transaction of every quota, pool or node write the scheduler reads."""
    if _change_recorder is not None:
        _change_recorder(reason)


def take_commit_turn() -> None:
    """First in an inventory change that guards placements (a node shrunk or deleted): no
    scheduling commit places on the node between the guard's read and this change's commit."""
    if _commit_turn is not None:
        _commit_turn()


def quota_status(quotas: Iterable[Quota]) -> dict[int, QuotaStatus]:
    """Status per quota id; zeros while no scheduler is registered."""
    quota_list = list(quotas)
    if _status_provider is not None:
        return _status_provider(quota_list)
    return {
        quota.pk: QuotaStatus(fair_share=0.0, allocated=0.0, allocated_self=0.0, running=0, pending=0)
        for quota in quota_list
    }


def preview() -> Preview:
    """What the next cycle would admit and evict, read inside the (rolled-back) transaction of a dry run."""
    if _preview_provider is not None:
        return _preview_provider()
    return Preview(admit=[], evict=[])


def quota_delete_blockers(quota: Quota) -> list[str]:
    """Reasons from the registered guards why `quota` must stay."""
    return [reason for guard in _quota_delete_guards if (reason := guard(quota))]


def node_delete_blockers(node: Node) -> list[str]:
    return [reason for guard in _node_delete_guards if (reason := guard(node))]


def node_move_blockers(node: Node) -> list[str]:
    """Reasons from the registered guards why `node` cannot move to another pool now."""
    return [reason for guard in _node_move_guards if (reason := guard(node))]


def node_shrink_blockers(node: Node, gpus: int) -> list[str]:
    """Reasons from the registered guards why `node` cannot go down to `gpus` GPUs."""
    return [reason for guard in _node_shrink_guards if (reason := guard(node, gpus))]
