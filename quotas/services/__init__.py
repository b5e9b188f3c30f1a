"""Every write of the quotas app: the quota tree, its operations, and the inventory.

Each public function checks who acts, takes the pool's locks in one order (the pool row,
then its quota or node rows by id), validates the whole change against the rules of
SCHEDULING.md §4, writes it with an audit record, and announces it after commit. Beside each
write `x` stands `preview_x`: the very same code inside a transaction that is rolled back once
the scheduler's preview has been read, so the preview sees the tree as it would be (the pattern
is described in `preview`).

Callers import from `quotas.services`; the modules below it are split by subject, each
importing only those above it in this list:

- `common`: who may act, the resources and their bounds, the pool's lock, after-commit signals,
  deleting a row with its audit record.
- `errors`: messages collected per field, their answer shape, the amounts they quote.
- `preview`: the dry run (rolled-back transaction, scheduler preview, fair shares).
- `rules`: the tree of a pool under lock, and the rules of SCHEDULING.md §4 over it.
- `tree`: create (one quota or a tree), update, delete. `guarantees`: scale, transfer.
- `nodes`: nodes and their devices; create, update, down/up, delete. `cordon`: cordon, drain, uncordon.
- `inventory`: inventory files, loaded through `nodes`.
- `pools`: resource pools; create, change, delete (refused while a pool holds nodes or quotas).
"""

from quotas.services.common import NODE_FIELDS, QUOTA_FIELDS, RESOURCES, Actor, _require_platform_admin
from quotas.services.cordon import (
    cordon_node,
    drain_node,
    preview_cordon_node,
    preview_drain_node,
    preview_uncordon_node,
    uncordon_node,
)
from quotas.services.errors import error_messages
from quotas.services.guarantees import preview_scale_quota, preview_transfer_quota, scale_quota, transfer_quota
from quotas.services.inventory import NODE_ENTRY_KEYS, InventoryResult, expand_node_entries, load_inventory
from quotas.services.nodes import (
    NewNode,
    NodeChanges,
    create_node,
    create_nodes,
    delete_node,
    node_snapshot,
    preview_create_node,
    preview_delete_node,
    preview_set_node_state,
    preview_update_node,
    set_node_state,
    update_node,
)
from quotas.services.pools import POOL_FIELDS, PoolChanges, create_pool, delete_pool, update_pool
from quotas.services.preview import DryRunPreview, DryRunResult, QuotaShare
from quotas.services.rules import quota_snapshot
from quotas.services.tree import (
    NewQuota,
    QuotaChanges,
    QuotaSettings,
    create_quota,
    create_quota_tree,
    delete_quota,
    preview_create_quota,
    preview_delete_quota,
    preview_update_quota,
    update_quota,
)

__all__ = [
    "NODE_ENTRY_KEYS",
    "NODE_FIELDS",
    "POOL_FIELDS",
    "QUOTA_FIELDS",
    "RESOURCES",
    "Actor",
    "DryRunPreview",
    "DryRunResult",
    "InventoryResult",
    "NewNode",
    "NewQuota",
    "NodeChanges",
    "PoolChanges",
    "QuotaChanges",
    "QuotaSettings",
    "QuotaShare",
    "_require_platform_admin",
    "cordon_node",
    "create_node",
    "create_nodes",
    "create_pool",
    "create_quota",
    "create_quota_tree",
    "delete_node",
    "delete_pool",
    "delete_quota",
    "drain_node",
    "error_messages",
    "expand_node_entries",
    "load_inventory",
    "node_snapshot",
    "preview_cordon_node",
    "preview_create_node",
    "preview_create_quota",
    "preview_delete_node",
    "preview_delete_quota",
    "preview_drain_node",
    "preview_scale_quota",
    "preview_set_node_state",
    "preview_transfer_quota",
    "preview_uncordon_node",
    "preview_update_node",
    "preview_update_quota",
    "quota_snapshot",
    "scale_quota",
    "set_node_state",
    "transfer_quota",
    "uncordon_node",
    "update_node",
    "update_pool",
    "update_quota",
]
