"""The Resource Quotas page's actions (New quota, New child, Scale, Transfer, Edit, the switches,
Delete) through the page kit's Preview and Confirm; the pages are quota_views.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from quotas import bounds, selectors, services
from quotas import forms as quota_forms
from quotas.models import Quota
from quotas.services import DryRunResult
from scheduling import selectors as scheduling_selectors
from scheduling.quota_views import _is_platform_admin, _visible_quota
from utilities.pagekit import PreviewAction, PreviewSummary, Reclaimable, ShareMove, run_preview_action

_TOLERANCE = 1e-9
QuotaAction = Callable[..., HttpResponse]


def _admin_action(view: QuotaAction) -> Callable[..., HttpResponse]:
    """Signed in, the quota visible (else 404), and a platform admin (else 403 with the reason)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, quota_id: int, **more: Any) -> HttpResponse:
        quota = _visible_quota(request, quota_id)
        if not _is_platform_admin(request):
            raise PermissionDenied("Only platform admins may change quotas.")
        return view(request, quota, **more)

    return wrapped


# ---------------------------------------------------------------------------------------------
# Reading a dry run in numbers
# ---------------------------------------------------------------------------------------------


def _summariser(pool_id: int | None) -> Callable[[DryRunResult], PreviewSummary]:
    """Takes the tree and the figures as they are now, to compare with the dry run's."""
    before_tree = {entry["name"]: entry for entry in selectors.quota_tree(pool=pool_id)} if pool_id else {}
    quotas = list(Quota.objects.filter(pool_id=pool_id).order_by("id")) if pool_id else []
    statuses = selectors.quota_statuses(quotas)
    before_share = {quota.name: statuses[quota.pk] for quota in quotas}
    ids = {quota.name: quota.pk for quota in quotas}

    def subtree(name: str, tree: Mapping[str, Any]) -> list[int]:
        names, found = [name], []
        while names:
            current = names.pop()
            if current in ids:
                found.append(ids[current])
            names.extend(child for child, entry in tree.items() if entry["parent"] == current)
        return found

    def summarise(result: DryRunResult) -> PreviewSummary:
        preview = result["preview"]
        assert preview is not None
        after_tree = {entry["name"]: entry for entry in preview["tree"]}
        after_share = {entry["name"]: entry for entry in preview["shares"]}
        moves: list[ShareMove] = []
        reclaimable: list[Reclaimable] = []
        for name in [*before_tree, *(name for name in after_tree if name not in before_tree)]:
            guaranteed_before = before_tree[name]["gpus"] if name in before_tree else None
            guaranteed_after = after_tree[name]["gpus"] if name in after_tree else None
            share_before = before_share[name]["fair_share"] if name in before_share else 0.0
            share_after = after_share[name]["fair_share"] if name in after_share else 0.0
            if guaranteed_before != guaranteed_after or abs(share_before - share_after) > _TOLERANCE:
                moves.append(
                    ShareMove(
                        quota=name,
                        guaranteed_before=guaranteed_before,
                        guaranteed_after=guaranteed_after,
                        fair_share_before=share_before,
                        fair_share_after=share_after,
                    )
                )
            if guaranteed_before is None or guaranteed_after is None or name not in before_share:
                continue
            allocated = before_share[name]["allocated"]
            newly_over = max(0.0, allocated - guaranteed_after) - max(0.0, allocated - guaranteed_before)
            if newly_over > _TOLERANCE:
                reclaimable.append(
                    Reclaimable(
                        quota=name,
                        allocated=allocated,
                        guaranteed=guaranteed_after,
                        gpus=newly_over,
                        jobs=_jobs_covering(subtree(name, after_tree), newly_over),
                    )
                )
        return PreviewSummary(
            moves=moves, reclaimable=reclaimable, evictions=preview["evict"], admissions=preview["admit"]
        )

    return summarise


def _jobs_covering(quota_ids: list[int], gpus: float) -> list[str]:
    """The newest jobs first (reclaim's order) until they hold the GPUs that become reclaimable."""
    named: list[str] = []
    covered = 0.0
    for held in scheduling_selectors.jobs_holding_gpus(quota_ids=quota_ids):
        if covered >= gpus - _TOLERANCE:
            break
        named.append(f"{held['job']} in {held['quota']} ({bounds.readable(held['gpus'])} GPUs)")
        covered += held["gpus"]
    return named


# What New quota and Edit set beside the name and guarantees: one list, so the two forms
# cannot drift apart when a setting is added.
_SETTINGS = (
    "limit",
    "cpu_limit",
    "memory_gib_limit",
    "weight",
    "child_preemption",
    "same_level_preemption",
    "queue_policy",
)


def _settings(cleaned: Mapping[str, Any]) -> dict[str, Any]:
    return {field: cleaned[field] for field in _SETTINGS}


_SCALED = ("cpu", "memory_gib", "cpu_limit", "memory_gib_limit")


def _scale_changes(quota: Quota, cleaned: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """What Scale changes: the GPUs always (a scale records even when equal), and each CPU or
    memory field whose value differs from the quota's (empty: none). Whether it is a plain scale:
    only guarantees, none unset, which scale_quota records as `quota.scale`; otherwise one
    update_quota moves guarantees and limits at once (a guarantee above its old limit would
    otherwise be refused)."""
    changes: dict[str, Any] = {"gpus": cleaned["gpus"]}
    changes.update({field: cleaned[field] for field in _SCALED if cleaned[field] != getattr(quota, field)})
    plain = all(field in ("gpus", "cpu", "memory_gib") and value is not None for field, value in changes.items())
    return plain, changes


def _create(request: HttpRequest, parent: Quota | None) -> HttpResponse:
    pool = parent.pool if parent is not None else selectors.default_pool()
    url = reverse("quota-new-child", args=[parent.pk]) if parent else reverse("quota-new")

    def new_quota(cleaned: Mapping[str, Any]) -> dict[str, Any]:
        fields = {
            "name": cleaned["name"],
            "parent": parent,
            "gpus": cleaned["gpus"],
            "cpu": cleaned["cpu"],
            "memory_gib": cleaned["memory_gib"],
            **_settings(cleaned),
        }
        if cleaned.get("pool") is not None:  # a root's pool; none chosen: the default pool
            fields["pool"] = cleaned["pool"]
        return fields

    action = PreviewAction(
        title=f"New child quota of {parent.name}" if parent else "New quota",
        intro=f"{parent.name} guarantees {bounds.readable(parent.gpus)} GPUs; its children share them."
        if parent
        else "A root quota guarantees GPUs of the pool.",
        url=url,
        done_url=reverse("resource-quotas"),
        form=(quota_forms.QuotaSettingsForm if parent else quota_forms.RootQuotaForm)(request.POST or None),
        preview=lambda cleaned: services.preview_create_quota(actor=request.user, **new_quota(cleaned)),
        apply=lambda cleaned: services.create_quota(actor=request.user, **new_quota(cleaned)),
        summarise=_summariser(pool.pk if pool else None),
        done_message=lambda cleaned: f"Created {cleaned['name']} with {bounds.readable(cleaned['gpus'])} GPUs.",
        confirm_label="Confirm: create",
    )
    return run_preview_action(request, action)


@login_required
def quota_new(request: HttpRequest) -> HttpResponse:
    if not _is_platform_admin(request):
        raise PermissionDenied("Only platform admins may create quotas.")
    return _create(request, None)


@_admin_action
def quota_new_child(request: HttpRequest, quota: Quota) -> HttpResponse:
    return _create(request, quota)


@_admin_action
def quota_scale(request: HttpRequest, quota: Quota) -> HttpResponse:
    def preview(cleaned: Mapping[str, Any]) -> services.DryRunResult:
        plain, changes = _scale_changes(quota, cleaned)
        if plain:
            return services.preview_scale_quota(actor=request.user, quota=quota, **changes)
        return services.preview_update_quota(actor=request.user, quota=quota, **changes)

    def apply(cleaned: Mapping[str, Any]) -> Quota:
        plain, changes = _scale_changes(quota, cleaned)
        if plain:
            return services.scale_quota(actor=request.user, quota=quota, **changes)
        return services.update_quota(actor=request.user, quota=quota, **changes)

    initial = {field: getattr(quota, field) for field in ("gpus", *_SCALED)}
    action = PreviewAction(
        title=f"Scale {quota.name}",
        intro=f"{quota.name} guarantees {bounds.readable(quota.gpus)} GPUs now.",
        url=reverse("quota-scale", args=[quota.pk]),
        done_url=reverse("resource-quotas"),
        form=quota_forms.ScaleForm(request.POST or None, initial=initial),
        preview=preview,
        apply=apply,
        summarise=_summariser(quota.pool_id),
        done_message=lambda cleaned: f"Scaled {quota.name} to {bounds.readable(cleaned['gpus'])} GPUs.",
        confirm_label="Confirm: scale",
    )
    return run_preview_action(request, action)


@_admin_action
def quota_transfer(request: HttpRequest, quota: Quota) -> HttpResponse:
    siblings = (
        selectors.visible_quotas(request.user)
        .filter(pool_id=quota.pool_id, parent_id=quota.parent_id)
        .exclude(pk=quota.pk)
        .order_by("name")
    )

    def preview(cleaned: Mapping[str, Any]) -> services.DryRunResult:
        return services.preview_transfer_quota(
            actor=request.user, source=quota, target=cleaned["target"], gpus=cleaned["gpus"]
        )

    def apply(cleaned: Mapping[str, Any]) -> tuple[Quota, Quota]:
        return services.transfer_quota(actor=request.user, source=quota, target=cleaned["target"], gpus=cleaned["gpus"])

    action = PreviewAction(
        title=f"Transfer from {quota.name}",
        intro=f"Moves guarantee from {quota.name} ({bounds.readable(quota.gpus)} GPUs) to a sibling in one step.",
        url=reverse("quota-transfer", args=[quota.pk]),
        done_url=reverse("resource-quotas"),
        form=quota_forms.TransferForm(request.POST or None, siblings=siblings),
        preview=preview,
        apply=apply,
        summarise=_summariser(quota.pool_id),
        done_message=lambda cleaned: (
            f"Moved {bounds.readable(cleaned['gpus'])} GPUs from {quota.name} to {cleaned['target'].name}."
        ),
        confirm_label="Confirm: transfer",
        field_aliases={"to": "target"},
    )
    return run_preview_action(request, action)


@_admin_action
def quota_edit(request: HttpRequest, quota: Quota) -> HttpResponse:
    initial = {field: getattr(quota, field) for field in ("name", *_SETTINGS)}
    action = PreviewAction(
        title=f"Edit {quota.name}",
        intro="Scale changes the guarantee; here are the other settings.",
        url=reverse("quota-edit", args=[quota.pk]),
        done_url=reverse("resource-quotas"),
        form=quota_forms.EditQuotaForm(request.POST or None, initial=initial),
        preview=lambda cleaned: services.preview_update_quota(
            actor=request.user, quota=quota, name=cleaned["name"], **_settings(cleaned)
        ),
        apply=lambda cleaned: services.update_quota(
            actor=request.user, quota=quota, name=cleaned["name"], **_settings(cleaned)
        ),
        summarise=_summariser(quota.pool_id),
        done_message=lambda cleaned: f"Saved {cleaned['name']}.",
        confirm_label="Confirm: save",
    )
    return run_preview_action(request, action)


SWITCHES = {
    "child-preemption": ("child_preemption", "Child-level Preemption"),
    "same-level-preemption": ("same_level_preemption", "Same-level Preemption"),
}


@_admin_action
def quota_switch(request: HttpRequest, quota: Quota, switch: str) -> HttpResponse:
    """Turn a preemption switch the other way; off takes a right to preempt away, so it previews first."""
    if switch not in SWITCHES:
        raise Http404("No such switch.")
    field, label = SWITCHES[switch]
    turn_on = not getattr(quota, field)
    state = "on" if turn_on else "off"

    changes: dict[str, Any] = {field: turn_on}

    action = PreviewAction(
        title=f"Turn {state} {label} of {quota.name}",
        intro=f"{label} of {quota.name} is {'off' if turn_on else 'on'} now.",
        url=reverse("quota-switch", args=[quota.pk, switch]),
        done_url=reverse("quota-detail", args=[quota.pk]),
        form=quota_forms.DeleteForm(request.POST or None),
        preview=lambda cleaned: services.preview_update_quota(actor=request.user, quota=quota, **changes),
        apply=lambda cleaned: services.update_quota(actor=request.user, quota=quota, **changes),
        summarise=_summariser(quota.pool_id),
        done_message=lambda cleaned: f"{label} of {quota.name} is {state}.",
        confirm_label=f"Confirm: turn {state}",
    )
    return run_preview_action(request, action)


@_admin_action
def quota_delete(request: HttpRequest, quota: Quota) -> HttpResponse:
    name = quota.name

    action = PreviewAction(
        title=f"Delete {name}",
        intro=f"Preview says whether {name} may go: not while child quotas, workspaces or live jobs use it.",
        url=reverse("quota-delete", args=[quota.pk]),
        done_url=reverse("resource-quotas"),
        form=quota_forms.DeleteForm(request.POST or None),
        preview=lambda cleaned: services.preview_delete_quota(actor=request.user, quota=quota),
        apply=lambda cleaned: services.delete_quota(actor=request.user, quota=quota),
        summarise=_summariser(quota.pool_id),
        done_message=lambda cleaned: f"Deleted {name}.",
        confirm_label="Confirm: delete",
    )
    return run_preview_action(request, action)
