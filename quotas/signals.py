"""Signals the quotas app sends after a committed change; the scheduler listens to run a cycle."""

from django.dispatch import Signal

# Sent via transaction.on_commit by quota and node services; kwargs: action, quota_ids / node_ids.
quota_tree_changed = Signal()
inventory_changed = Signal()
