"""Every rule of the quota tree, valid and invalid, with the message a person reads.

Each row runs one operation on the PAI tree (16 × 8 GPUs; Quota1 = 128 → Quota1.1 = 48,
Quota1.2 = 80). A refused change leaves the tree and the audit log exactly as they were, and a
dry run of the same change answers the same errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError

from quotas import hooks, selectors, services
from quotas.models import AuditRecord, Quota

Tree = dict[str, Quota]
Operation = Callable[[Tree, bool], Any]


def create(**fields: Any) -> Operation:
    return lambda tree, dry_run: (services.preview_create_quota if dry_run else services.create_quota)(
        actor=None, **fields
    )


def update(quota: str, /, **changes: Any) -> Operation:
    return lambda tree, dry_run: (services.preview_update_quota if dry_run else services.update_quota)(
        actor=None, quota=tree[quota], **changes
    )


def scale(name: str, **amounts: Any) -> Operation:
    return lambda tree, dry_run: (services.preview_scale_quota if dry_run else services.scale_quota)(
        actor=None, quota=tree[name], **amounts
    )


def transfer(source: str, target: str, **amounts: Any) -> Operation:
    return lambda tree, dry_run: (services.preview_transfer_quota if dry_run else services.transfer_quota)(
        actor=None, source=tree[source], target=tree[target], **amounts
    )


def delete(name: str) -> Operation:
    return lambda tree, dry_run: (services.preview_delete_quota if dry_run else services.delete_quota)(
        actor=None, quota=tree[name]
    )


def given(*steps: Operation) -> Callable[[Tree], None]:
    """Changes made (and committed) before the operation under test."""

    def apply(tree: Tree) -> None:
        for step in steps:
            outcome = step(tree, False)
            if isinstance(outcome, Quota):
                tree[outcome.name] = outcome

    return apply


VALID = [
    pytest.param(None, create(name="Quota1.3", parent="Quota1"), id="child-with-zero-guarantee"),
    pytest.param(None, scale("Quota1.1", gpus=10), id="scale-down-is-always-allowed"),
    pytest.param(None, scale("Quota1.1", gpus=48), id="scale-to-the-same-amount"),
    pytest.param(None, update("Quota1.1", limit=48), id="limit-equal-to-gpus"),
    pytest.param(given(update("Quota1", limit=128)), update("Quota1", limit=None), id="no-limit"),
    pytest.param(None, update("Quota1.1", weight=0), id="weight-zero-borrows-nothing-idle"),
    pytest.param(None, update("Quota1.1", rank=-3), id="negative-rank-is-a-rank"),
    pytest.param(None, update("Quota1.1", min_runtime_seconds=0), id="min-runtime-zero"),
    pytest.param(None, update("Quota1.1", queue_policy="fifo"), id="fifo-queue"),
    pytest.param(None, update("Quota1", child_preemption=False, same_level_preemption=True), id="switches"),
    pytest.param(None, update("Quota1.1", name="team-vision"), id="rename"),
    pytest.param(None, update("Quota1.1", parent="Quota1.2"), id="move-under-a-sibling-with-room"),
    pytest.param(None, scale("Quota1", cpu=1536, memory_gib=12288), id="root-cpu-and-memory-up-to-the-pool"),
    pytest.param(None, transfer("Quota1.2", "Quota1.1", gpus=8), id="transfer-between-siblings"),
    pytest.param(None, transfer("Quota1.2", "Quota1.1", gpus=80), id="transfer-everything"),
    pytest.param(None, scale("Quota1.1", gpus=47.5), id="fractional-guarantee"),
    pytest.param(None, delete("Quota1.1"), id="delete-a-leaf"),
]


@pytest.mark.parametrize(("setup", "operation"), VALID)
def test_a_valid_change_is_applied_and_audited(
    pai_tree: Tree, setup: Callable[[Tree], None] | None, operation: Operation
) -> None:
    if setup is not None:
        setup(pai_tree)
    records = AuditRecord.objects.count()

    preview = operation(pai_tree, True)

    assert preview["valid"] is True, preview["errors"]
    assert preview["errors"] == {}
    assert AuditRecord.objects.count() == records, "a dry run writes nothing"
    operation(pai_tree, False)
    assert AuditRecord.objects.count() == records + 1
    assert selectors.quota_tree() == preview["preview"]["tree"], "the dry run previewed exactly this tree"


INVALID = [
    pytest.param(
        None,
        scale("Quota1.1", gpus=56),
        "gpus",
        "Quota1.1 would need 56 GPUs but Quota1 has 128 − 80 = 48 left for its children.",
        id="child-above-parents-room",
    ),
    pytest.param(
        None,
        create(name="Quota1.3", parent="Quota1", gpus=8),
        "gpus",
        "Quota1.3 would need 8 GPUs but Quota1 has 128 − 128 = 0 left for its children.",
        id="new-child-in-a-full-parent",
    ),
    pytest.param(
        None,
        create(name="Quota2", gpus=1),
        "gpus",
        "Quota2 would need 1 GPU but the pool default has 128 − 128 = 0 left for its root quotas.",
        id="roots-above-pool-capacity",
    ),
    pytest.param(
        None,
        scale("Quota1", gpus=136),
        "gpus",
        "Quota1 would need 136 GPUs but the pool default has 128 − 0 = 128 left for its root quotas.",
        id="root-scaled-above-pool-capacity",
    ),
    pytest.param(
        None,
        scale("Quota1", gpus=100),
        "gpus",
        "Quota1 would guarantee 100 GPUs but its children hold 48 + 80 = 128 GPUs; scale them down first.",
        id="parent-scaled-below-its-children",
    ),
    pytest.param(
        None,
        update("Quota1.1", limit=40),
        "limit",
        "The limit of Quota1.1 (40 GPUs) is below its guarantee of 48 GPUs; the limit must be at least gpus.",
        id="limit-below-gpus",
    ),
    pytest.param(
        given(scale("Quota1.1", gpus=40), update("Quota1.1", limit=40)),
        scale("Quota1.1", gpus=44),
        "limit",
        "The limit of Quota1.1 (40 GPUs) is below its guarantee of 44 GPUs; the limit must be at least gpus.",
        id="scale-above-limit",
    ),
    pytest.param(
        None,
        create(name="Quota1.3", parent="Quota1", gpus=-1),
        "gpus",
        "gpus of Quota1.3 must be at least 0, got -1 GPUs.",
        id="negative-gpus",
    ),
    pytest.param(
        None,
        scale("Quota1", cpu=-2),
        "cpu",
        "cpu of Quota1 must be at least 0, got -2 CPU cores.",
        id="negative-cpu",
    ),
    pytest.param(
        None,
        scale("Quota1", memory_gib=-0.5),
        "memory_gib",
        "memory_gib of Quota1 must be at least 0, got -0.5 GiB of memory.",
        id="negative-memory",
    ),
    pytest.param(
        None,
        update("Quota1.1", weight=-1),
        "weight",
        "weight of Quota1.1 must be at least 0, got -1.",
        id="negative-weight",
    ),
    pytest.param(
        None,
        update("Quota1.1", limit=-8),
        "limit",
        "limit of Quota1.1 must be at least 0, got -8 GPUs.",
        id="negative-limit",
    ),
    pytest.param(
        None,
        update("Quota1.1", min_runtime_seconds=-60),
        "min_runtime_seconds",
        "min_runtime_seconds of Quota1.1 must be a whole number ≥ 0, got -60.",
        id="negative-min-runtime",
    ),
    pytest.param(
        None,
        scale("Quota1.1", gpus=float("nan")),
        "gpus",
        "gpus of Quota1.1 must be a number, got nan.",
        id="gpus-not-a-number",
    ),
    pytest.param(
        None,
        update("Quota1.1", queue_policy="lifo"),
        "queue_policy",
        "queue_policy 'lifo' is not one of best_effort, fifo.",
        id="unknown-queue-policy",
    ),
    pytest.param(
        None,
        create(name="Quota1.1", parent="Quota1"),
        "name",
        "A quota named 'Quota1.1' already exists; quota names are unique.",
        id="duplicate-name",
    ),
    pytest.param(
        None,
        update("Quota1.2", name="Quota1.1"),
        "name",
        "A quota named 'Quota1.1' already exists; quota names are unique.",
        id="rename-onto-another-name",
    ),
    pytest.param(None, create(name="  ", parent="Quota1"), "name", "A quota needs a name.", id="blank-name"),
    pytest.param(
        None,
        update("Quota1", parent="Quota1"),
        "parent",
        "Quota1 cannot be its own parent.",
        id="own-parent",
    ),
    pytest.param(
        given(scale("Quota1.1", gpus=0), scale("Quota1.2", gpus=0), scale("Quota1", gpus=0)),
        update("Quota1", parent="Quota1.1"),
        "parent",
        "Quota1 cannot move under Quota1.1: Quota1.1 is inside the subtree of Quota1, which would make a cycle.",
        id="cycle",
    ),
    pytest.param(
        None,
        create(name="Quota1.3", parent="Quota9"),
        "parent",
        "There is no quota named 'Quota9'.",
        id="unknown-parent",
    ),
    pytest.param(
        None,
        update("Quota1.1", parent="Quota1.2", gpus=96),
        "gpus",
        "Quota1.1 would need 96 GPUs but Quota1.2 has 80 − 0 = 80 left for its children.",
        id="move-under-a-parent-without-room",
    ),
    pytest.param(
        None,
        scale("Quota1.1", cpu=16),
        "cpu",
        "Quota1.1 sets 16 CPU cores but its parent Quota1 guarantees no CPU cores; give Quota1 a cpu guarantee first.",
        id="child-cpu-under-a-parent-without-cpu",
    ),
    pytest.param(
        None,
        scale("Quota1", cpu=2000),
        "cpu",
        "Quota1 would need 2000 CPU cores but the pool default has 1536 − 0 = 1536 left for its root quotas.",
        id="root-cpu-above-pool",
    ),
    pytest.param(
        given(scale("Quota1", memory_gib=1024), scale("Quota1.2", memory_gib=1000)),
        scale("Quota1.1", memory_gib=100),
        "memory_gib",
        "Quota1.1 would need 100 GiB of memory but Quota1 has 1024 − 1000 = 24 left for its children.",
        id="child-memory-above-parents-room",
    ),
    pytest.param(
        given(scale("Quota1", cpu=64), scale("Quota1.1", cpu=32)),
        update("Quota1", cpu=None),
        "cpu",
        "Quota1 cannot drop its cpu guarantee while its children hold 32 CPU cores.",
        id="parent-drops-cpu-its-children-use",
    ),
    pytest.param(
        None,
        delete("Quota1"),
        "quota",
        "Quota1 has 2 child quota(s) (Quota1.1, Quota1.2); delete them first.",
        id="delete-with-children",
    ),
    pytest.param(
        None,
        transfer("Quota1.2", "Quota1.1", gpus=96),
        "gpus",
        "Quota1.2 has 80 GPUs; it cannot give 96 GPUs.",
        id="transfer-more-than-the-source-has",
    ),
    pytest.param(
        None,
        transfer("Quota1.2", "Quota1", gpus=8),
        "to",
        "Quota1 is not a sibling of Quota1.2: their parents are none (a root) and Quota1; "
        "transfers move guarantee between quotas of one parent.",
        id="transfer-to-a-non-sibling",
    ),
    pytest.param(
        None, transfer("Quota1.2", "Quota1.2", gpus=8), "to", "Quota1.2 cannot transfer to itself.", id="self"
    ),
    pytest.param(
        None,
        transfer("Quota1.2", "Quota1.1"),
        "gpus",
        "A transfer must move something: gpus, cpu and memory_gib are all 0.",
        id="transfer-nothing",
    ),
    pytest.param(
        None,
        transfer("Quota1.2", "Quota1.1", gpus=-8),
        "gpus",
        "The gpus to transfer must be at least 0, got -8.",
        id="transfer-negative",
    ),
    pytest.param(
        given(update("Quota1.1", limit=50)),
        transfer("Quota1.2", "Quota1.1", gpus=8),
        "limit",
        "The limit of Quota1.1 (50 GPUs) is below its guarantee of 56 GPUs; the limit must be at least gpus.",
        id="transfer-above-the-targets-limit",
    ),
    pytest.param(
        given(create(name="Quota1.2.1", parent="Quota1.2", gpus=80)),
        transfer("Quota1.2", "Quota1.1", gpus=8),
        "gpus",
        "Quota1.2 would guarantee 72 GPUs but its children hold 80 = 80 GPUs; scale them down first.",
        id="transfer-below-what-the-sources-children-hold",
    ),
    pytest.param(
        None,
        transfer("Quota1.2", "Quota1.1", cpu=4),
        "cpu",
        "Quota1.2 has no cpu guarantee to give.",
        id="transfer-a-resource-the-source-lacks",
    ),
]


def tree_state() -> tuple[list[selectors.QuotaTreeEntry], int]:
    return selectors.quota_tree(), AuditRecord.objects.count()


@pytest.mark.parametrize(("setup", "operation", "field", "message"), INVALID)
def test_an_invalid_change_is_refused_with_the_numbers(
    pai_tree: Tree, setup: Callable[[Tree], None] | None, operation: Operation, field: str, message: str
) -> None:
    if setup is not None:
        setup(pai_tree)
    before = tree_state()

    with pytest.raises(ValidationError) as refused:
        operation(pai_tree, False)

    assert message in refused.value.message_dict[field]
    assert tree_state() == before, "nothing is half written"
    preview = operation(pai_tree, True)
    assert preview == {"valid": False, "errors": refused.value.message_dict, "preview": None}
    assert tree_state() == before


def test_every_broken_rule_is_named_at_once(pai_tree: Tree) -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_quota(actor=None, name="Quota1.3", parent="Quota1", gpus=-1, weight=-2, queue_policy="x")

    assert set(refused.value.message_dict) == {"gpus", "weight", "queue_policy"}


def test_a_registered_delete_guard_keeps_a_quota(pai_tree: Tree) -> None:
    def bound_to_workspace(quota: Quota) -> str | None:
        return f"{quota.name} is bound to workspace team-a." if quota.name == "Quota1.1" else None

    hooks.register_quota_delete_guard(bound_to_workspace)
    try:
        with pytest.raises(ValidationError) as refused:
            services.delete_quota(actor=None, quota=pai_tree["Quota1.1"])
        services.delete_quota(actor=None, quota=pai_tree["Quota1.2"])
    finally:
        hooks.unregister_quota_delete_guard(bound_to_workspace)

    assert refused.value.message_dict["quota"] == ["Quota1.1 is bound to workspace team-a."]
    assert list(Quota.objects.values_list("name", flat=True)) == ["Quota1", "Quota1.1"]


def test_weight_follows_gpus_until_set_even_after_a_scale(pai_tree: Tree) -> None:
    quota = services.scale_quota(actor=None, quota=pai_tree["Quota1.1"], gpus=40)
    assert (quota.weight, quota.effective_weight) == (None, 40)

    quota = services.update_quota(actor=None, quota=quota, weight=3)
    quota = services.scale_quota(actor=None, quota=quota, gpus=20)
    assert (quota.weight, quota.effective_weight) == (3, 3)

    quota = services.update_quota(actor=None, quota=quota, weight=None)
    assert quota.effective_weight == 20


def test_a_root_without_inventory_may_only_guarantee_nothing(db: None) -> None:
    root = services.create_quota(actor=None, name="empty", gpus=0)
    assert root.pool.name == "default"

    with pytest.raises(ValidationError) as refused:
        services.scale_quota(actor=None, quota=root, gpus=8)
    assert refused.value.message_dict["gpus"] == [
        "empty would need 8 GPUs but the pool default has 0 − 0 = 0 left for its root quotas."
    ]


def test_non_admins_may_not_change_the_tree(pai_tree: Tree, make_user: Callable[..., Any]) -> None:
    member = make_user("member")

    with pytest.raises(Exception) as refused:
        services.scale_quota(actor=member, quota=pai_tree["Quota1.1"], gpus=10)

    assert type(refused.value).__name__ == "PermissionDenied"
    assert str(refused.value) == "Only platform admins may scale quotas."


def test_a_quota_bound_to_a_workspace_stays(pai_tree: Tree) -> None:
    """The workspaces app (above this one) holds the bindings; it is reached by name, not imported."""
    workspace_model = apps.get_model("workspaces", "Workspace")
    binding_model = apps.get_model("workspaces", "QuotaBinding")
    workspace = workspace_model.objects.create(name="team-a")
    binding_model.objects.create(workspace=workspace, quota=pai_tree["Quota1.1"])

    with pytest.raises(ValidationError) as refused:
        services.delete_quota(actor=None, quota=pai_tree["Quota1.1"])

    assert any("team-a" in message for message in refused.value.message_dict["quota"]), refused.value
    assert Quota.objects.filter(name="Quota1.1").exists()
