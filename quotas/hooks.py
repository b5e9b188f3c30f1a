"""Figures that a higher layer computes and the quotas app shows.

Imports point one way (scheduling → workspaces → quotas), yet a quota's `status` and a
dry-run `preview` come from the scheduler. The scheduling app registers its providers here
at start (`SchedulingConfig.ready`); until then the quotas app answers with what it has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypedDict

from quotas.models import Quota


class QuotaStatus(TypedDict):
    fair_share: float
    allocated: float
    allocated_self: float
    running: int
    pending: int


class Preview(TypedDict):
    admit: list[dict[str, Any]]
    evict: list[dict[str, Any]]


StatusProvider = Callable[[list[Quota]], dict[int, QuotaStatus]]
PreviewProvider = Callable[[], Preview]

_status_provider: StatusProvider | None = None
_preview_provider: PreviewProvider | None = None


def register_status_provider(provider: StatusProvider) -> None:
    global _status_provider
    _status_provider = provider


def register_preview_provider(provider: PreviewProvider) -> None:
    global _preview_provider
    _preview_provider = provider


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
