"""Dry runs: the operation runs inside a transaction that is rolled back once the scheduler's
preview has been read, so the preview sees the tree as it would be.

One pattern for every write that can be previewed (follow it for the next one):

    def _scale_quota_change(*, actor, quota, ...) -> Callable[[], Quota]:
        _require_platform_admin(actor, "scale quotas")    # refused at once, in both cases
        def apply() -> Quota: ...                          # locks, validates, writes, audits
        return apply

    def preview_scale_quota(*, actor, quota, ...) -> DryRunResult:
        return _dry_run(_scale_quota_change(actor=actor, quota=quota, ...), pool_id=quota.pool_id)

    def scale_quota(*, actor, quota, ...) -> Quota:
        return _scale_quota_change(actor=actor, quota=quota, ...)()

The preview and the write run the very same `apply`, so they cannot disagree. A refusal inside
`apply` (ValidationError) is the preview's `{valid: false, errors}`, and is raised by the write;
PermissionDenied is raised by both. Callers choose the function; no service takes a `dry_run` flag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import hooks, selectors
from quotas.models import Node, Quota
from quotas.services.errors import error_messages


class QuotaShare(TypedDict):
    """A quota's fair share and allocation as the scheduler would see them after the change."""

    name: str
    fair_share: float
    allocated: float


class DryRunPreview(TypedDict):
    admit: list[dict[str, Any]]
    evict: list[dict[str, Any]]
    tree: list[selectors.QuotaTreeEntry]
    # Read inside the rolled-back transaction, so a page can say which fair shares move.
    shares: list[QuotaShare]


class DryRunResult(TypedDict):
    """What a dry run answers; `preview` is None when the change is invalid (nothing would happen)."""

    valid: bool
    errors: dict[str, list[str]]
    preview: DryRunPreview | None


class _RollBack(Exception):
    """Leaves a dry run's transaction so that nothing it applied is committed."""


def _dry_run(apply: Callable[[], object], *, pool_id: int | None) -> DryRunResult:
    outcome: DryRunResult | None = None
    try:
        with transaction.atomic():
            applied = apply()
            if pool_id is None and isinstance(applied, (Quota, Node)):
                pool_id = applied.pool_id
            scheduler_preview = hooks.preview()
            outcome = DryRunResult(
                valid=True,
                errors={},
                preview=DryRunPreview(
                    admit=scheduler_preview["admit"],
                    evict=scheduler_preview["evict"],
                    tree=selectors.quota_tree(pool=pool_id) if pool_id is not None else [],
                    shares=_shares(pool_id),
                ),
            )
            raise _RollBack
    except _RollBack:
        assert outcome is not None
        return outcome
    except ValidationError as error:
        return DryRunResult(valid=False, errors=error_messages(error), preview=None)


def _shares(pool_id: int | None) -> list[QuotaShare]:
    if pool_id is None:
        return []
    quotas = list(Quota.objects.filter(pool_id=pool_id).order_by("id"))
    statuses = selectors.quota_statuses(quotas)
    return [
        QuotaShare(
            name=quota.name, fair_share=statuses[quota.pk]["fair_share"], allocated=statuses[quota.pk]["allocated"]
        )
        for quota in quotas
    ]
