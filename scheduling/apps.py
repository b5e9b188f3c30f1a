from __future__ import annotations

from typing import Any

from django.apps import AppConfig


def _quota_tree_changed(sender: Any, **kwargs: Any) -> None:
    from scheduling.triggers import request_cycle

    request_cycle(f"quota:{kwargs.get('action', 'changed')}")


def _inventory_changed(sender: Any, **kwargs: Any) -> None:
    from quotas.models import Node
    from scheduling.services import release_jobs_on_down_node
    from scheduling.triggers import request_cycle

    action = kwargs.get("action", "changed")
    if action == "node.down":
        # The cluster is the ready nodes: what ran on a node that went down must run elsewhere.
        for node_id, node_name in Node.objects.filter(pk__in=kwargs.get("node_ids", [])).values_list("id", "name"):
            release_jobs_on_down_node(node_id=node_id, node_name=node_name)
    request_cycle(f"inventory:{action}")


class SchedulingConfig(AppConfig):
    name = "scheduling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The quotas app sends these after commit and shows figures only the scheduler knows.
        from quotas import hooks, signals
        from scheduling import changes, cycle, providers, tasks, triggers

        signals.quota_tree_changed.connect(_quota_tree_changed, dispatch_uid="scheduling-quota-tree-changed")
        signals.inventory_changed.connect(_inventory_changed, dispatch_uid="scheduling-inventory-changed")
        triggers.register_runners(
            triggers.CycleRunners(
                run_cycle=lambda reason: cycle.run_cycle(trigger=reason),
                in_cycle=cycle.in_cycle,
                queue_cycle=lambda reason: tasks.run_scheduling_cycle.apply_async(
                    kwargs={"trigger": reason}, retry=False
                ),
            )
        )
        hooks.register_status_provider(providers.quota_status)
        hooks.register_preview_provider(providers.preview)
        hooks.register_change_recorder(changes.note)
        if hasattr(hooks, "register_quota_delete_guard"):
            hooks.register_quota_delete_guard(providers.quota_delete_guard)
            hooks.register_node_delete_guard(providers.node_delete_guard)
            hooks.register_node_shrink_guard(providers.node_shrink_guard)
            hooks.register_node_move_guard(providers.node_move_guard)
            hooks.register_commit_turn(providers.commit_turn)
