"""Placeholder until fair share lands."""

from scheduling.engine.types import Snapshot


def fair_shares(snapshot: Snapshot) -> dict[str, float]:
    return {quota.name: quota.gpus for quota in snapshot.quotas}
