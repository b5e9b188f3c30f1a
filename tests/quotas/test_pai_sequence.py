"""PAI's Resource Quotas walk-through: the tree, a refused scale, the transfer, and what it leaves behind."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from quotas import hooks, selectors, services, signals
from quotas.models import AuditRecord, Quota
from tests.quotas.conftest import fresh

Tree = dict[str, Quota]


def guarantees() -> dict[str, float]:
    return dict(Quota.objects.values_list("name", "gpus"))


def test_the_pai_tree_scale_and_transfer_sequence(pai_tree: Tree, platform_admin: Any) -> None:
    assert guarantees() == {"Quota1": 128, "Quota1.1": 48, "Quota1.2": 80}
    assert selectors.pool_capacity(pool=pai_tree["Quota1"].pool)["gpus"] == 128

    # Quota1.1 cannot simply grow to 56: Quota1.2 holds the rest of Quota1.
    with pytest.raises(ValidationError) as refused:
        services.scale_quota(actor=platform_admin, quota=pai_tree["Quota1.1"], gpus=56)
    assert refused.value.message_dict == {
        "gpus": ["Quota1.1 would need 56 GPUs but Quota1 has 128 − 80 = 48 left for its children."]
    }

    # The transfer moves 8 GPUs in one step: 80→72 and 48→56.
    source, target = services.transfer_quota(
        actor=platform_admin, source=pai_tree["Quota1.2"], target=pai_tree["Quota1.1"], gpus=8
    )
    assert (source.gpus, target.gpus) == (72, 56)
    assert guarantees() == {"Quota1": 128, "Quota1.1": 56, "Quota1.2": 72}

    # Scaling down is always allowed, and then up again within the room it made.
    services.scale_quota(actor=platform_admin, quota=fresh(pai_tree["Quota1.2"]), gpus=64)
    services.scale_quota(actor=platform_admin, quota=fresh(pai_tree["Quota1.1"]), gpus=60)
    assert guarantees() == {"Quota1": 128, "Quota1.1": 60, "Quota1.2": 64}

    log = list(AuditRecord.objects.filter(object_type="quota").order_by("id").values("action", "object_repr", "after"))
    assert log[-3:] == [
        {
            "action": "quota.transfer",
            "object_repr": "Quota1.2 → Quota1.1",
            "after": {"Quota1.2": {"gpus": 72}, "Quota1.1": {"gpus": 56}},
        },
        {"action": "quota.scale", "object_repr": "Quota1.2", "after": {"gpus": 64}},
        {"action": "quota.scale", "object_repr": "Quota1.1", "after": {"gpus": 60}},
    ]
    assert AuditRecord.objects.filter(action="quota.transfer").get().actor == platform_admin


def test_a_dry_run_previews_the_new_tree_and_changes_nothing(
    pai_tree: Tree, django_capture_on_commit_callbacks: Any
) -> None:
    seen_by_scheduler: list[dict[str, float]] = []

    def preview() -> hooks.Preview:
        # The scheduler reads the database inside the dry run's transaction: it sees the change applied.
        seen_by_scheduler.append(guarantees())
        return hooks.Preview(admit=[{"job": "train-b"}], evict=[])

    previous = hooks.register_preview_provider(preview)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            result = services.preview_transfer_quota(
                actor=None, source=pai_tree["Quota1.2"], target=pai_tree["Quota1.1"], gpus=8
            )
    finally:
        hooks.register_preview_provider(previous)

    assert seen_by_scheduler == [{"Quota1": 128, "Quota1.1": 56, "Quota1.2": 72}]
    assert result["valid"] is True
    assert result["preview"] is not None
    assert result["preview"]["admit"] == [{"job": "train-b"}]
    assert {entry["name"]: entry["gpus"] for entry in result["preview"]["tree"]} == {
        "Quota1": 128,
        "Quota1.1": 56,
        "Quota1.2": 72,
    }
    assert guarantees() == {"Quota1": 128, "Quota1.1": 48, "Quota1.2": 80}
    assert callbacks == [], "a dry run announces nothing to the scheduler"
    assert not AuditRecord.objects.filter(action="quota.transfer").exists()


def test_a_committed_change_tells_the_scheduler_after_commit(
    pai_tree: Tree, django_capture_on_commit_callbacks: Any
) -> None:
    received: list[dict[str, Any]] = []

    def on_change(sender: Any, **kwargs: Any) -> None:
        received.append({key: value for key, value in kwargs.items() if key != "signal"})

    signals.quota_tree_changed.connect(on_change)
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.transfer_quota(actor=None, source=pai_tree["Quota1.2"], target=pai_tree["Quota1.1"], gpus=8)
        assert received == [], "nothing is sent before the commit"
        for callback in callbacks:
            callback()
    finally:
        signals.quota_tree_changed.disconnect(on_change)

    assert received == [{"action": "quota.transfer", "quota_ids": [pai_tree["Quota1.2"].pk, pai_tree["Quota1.1"].pk]}]


def test_child_preemption_toggles_and_is_audited(pai_tree: Tree, platform_admin: Any) -> None:
    quota = services.update_quota(actor=platform_admin, quota=pai_tree["Quota1"], child_preemption=False)

    assert fresh(quota).child_preemption is False
    record = AuditRecord.objects.filter(action="quota.update").latest("id")
    assert (record.before, record.after) == ({"child_preemption": True}, {"child_preemption": False})
