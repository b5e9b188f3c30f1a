"""Every write of the quotas app: the quota tree, its operations, and the inventory.

Each public function checks who acts, takes the pool's locks in one order (the pool row,
then its quota or node rows by id), validates the whole change against the rules of
SCHEDULING.md §4, writes it with an audit record, and announces it after commit. With
`dry_run=True` the very same code runs inside a transaction that is rolled back once the
scheduler's preview has been read, so the preview sees the tree as it would be.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Unpack, overload

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError, Sum

from quotas import audit, bounds, hooks, selectors, signals
from quotas.models import GpuDevice, Node, NodeExecutor, NodeState, QueuePolicy, Quota, ResourcePool

Actor = AbstractBaseUser | AnonymousUser | None

# (field, unit) of each guaranteed resource; GPUs are always managed, CPU and memory when set.
RESOURCES: tuple[tuple[str, str], ...] = (("gpus", "GPUs"), ("cpu", "CPU cores"), ("memory_gib", "GiB of memory"))
# The most a client may ask of each amount of a quota (quotas.bounds).
_QUOTA_MAXIMA: Mapping[str, float] = {
    "gpus": bounds.QUOTA_GPUS_MAX,
    "cpu": bounds.QUOTA_CPU_MAX,
    "memory_gib": bounds.QUOTA_MEMORY_GIB_MAX,
    "limit": bounds.QUOTA_GPUS_MAX,
    "weight": bounds.QUOTA_WEIGHT_MAX,
}
_NODE_MAXIMA: Mapping[str, float] = {"cpu": bounds.NODE_CPU_MAX, "memory_gib": bounds.NODE_MEMORY_GIB_MAX}
# Sums of floats (0.1 + 0.2) must not fail a rule they meet exactly.
_TOLERANCE = 1e-9

QUOTA_FIELDS = (
    "name",
    "parent",
    "gpus",
    "cpu",
    "memory_gib",
    "limit",
    "weight",
    "rank",
    "child_preemption",
    "same_level_preemption",
    "queue_policy",
    "min_runtime_seconds",
)
NODE_FIELDS = ("name", "gpus", "cpu", "memory_gib", "gpu_model", "labels", "state", "executor")


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


class QuotaSettings(TypedDict, total=False):
    """A quota's guarantees, limit and switches; what is left out keeps the model's default."""

    gpus: float
    cpu: float | None
    memory_gib: float | None
    limit: float | None
    weight: float | None
    rank: int
    child_preemption: bool
    same_level_preemption: bool
    queue_policy: str
    min_runtime_seconds: int | None


class QuotaChanges(QuotaSettings, total=False):
    name: str
    parent: Quota | str | None


class NodeChanges(TypedDict, total=False):
    name: str
    gpus: int
    cpu: float
    memory_gib: float
    gpu_model: str
    labels: dict[str, Any]
    state: str
    executor: str


class InventoryResult(TypedDict):
    created: list[str]
    updated: list[str]
    unchanged: list[str]


# --------------------------------------------------------------------------------------------
# Shared machinery: who may act, dry runs, number formatting, errors
# --------------------------------------------------------------------------------------------


class _RollBack(Exception):
    """Leaves a dry run's transaction so that nothing it applied is committed."""


class _Errors:
    """Collects messages per field, so one answer names every broken rule at once."""

    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = defaultdict(list)

    def add(self, field: str, message: str) -> None:
        if message not in self.by_field[field]:
            self.by_field[field].append(message)

    def raise_if_any(self) -> None:
        if self.by_field:
            raise ValidationError(dict(self.by_field))


def _require_platform_admin(actor: Actor, what: str) -> None:
    # None is the system itself (the scenario runner, management commands).
    if actor is None:
        return
    if not (actor.is_authenticated and getattr(actor, "is_superuser", False)):
        raise PermissionDenied(f"Only platform admins may {what}.")


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


def error_messages(error: ValidationError) -> dict[str, list[str]]:
    """A ValidationError as {field: [messages]}, the shape of API errors and dry-run answers."""
    if hasattr(error, "error_dict"):
        return {field: [str(message) for message in messages] for field, messages in error.message_dict.items()}
    return {"non_field_errors": [str(message) for message in error.messages]}


def _number(amount: float | None) -> str:
    """48.0 reads as 48; fractions keep up to three decimals."""
    if amount is None:
        return "none"
    if abs(amount - round(amount)) < _TOLERANCE:
        return str(round(amount))
    return f"{amount:.3f}".rstrip("0").rstrip(".")


def _amount(amount: float, unit: str) -> str:
    if unit == "GPUs" and abs(amount - 1) < _TOLERANCE:
        return "1 GPU"
    return f"{_number(amount)} {unit}"


def _unit(field: str) -> str:
    return dict(RESOURCES)[field]


def _pool_or_default(pool: ResourcePool | None) -> ResourcePool:
    if pool is not None:
        return pool
    try:
        created, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    except IntegrityError:
        # Two first writers raced to create it; the other one won.
        created = ResourcePool.objects.get(name=ResourcePool.DEFAULT_NAME)
    return created


def _lock_pool(pool_id: int) -> ResourcePool:
    """Every writer of a pool's tree or inventory takes this lock first, so they serialise in one order."""
    return ResourcePool.objects.select_for_update().get(pk=pool_id)


def _on_commit_send(signal: Any, sender: type, **kwargs: Any) -> None:
    transaction.on_commit(lambda: signal.send(sender=sender, **kwargs))


# --------------------------------------------------------------------------------------------
# The tree as it would be: loaded under lock, changed in memory, validated, then saved
# --------------------------------------------------------------------------------------------


@dataclass
class _Capacity:
    gpus: float
    cpu: float
    memory_gib: float


class _Tree:
    """The quotas of one pool, locked, with the changes of one operation applied in memory."""

    def __init__(self, pool: ResourcePool) -> None:
        self.pool = pool
        # FOR UPDATE in id order: the second of two conflicting writers waits here and then
        # reads the first one's committed values.
        self.quotas: dict[int, Quota] = {
            quota.pk: quota for quota in Quota.objects.select_for_update().filter(pool=pool).order_by("id")
        }
        totals = Node.objects.filter(pool=pool).aggregate(
            gpus=Sum("gpus"), cpu=Sum("cpu"), memory_gib=Sum("memory_gib")
        )
        self.capacity = _Capacity(
            gpus=float(totals["gpus"] or 0), cpu=float(totals["cpu"] or 0), memory_gib=float(totals["memory_gib"] or 0)
        )

    @classmethod
    def locked(cls, pool_id: int) -> _Tree:
        return cls(_lock_pool(pool_id))

    def get(self, quota: Quota | int) -> Quota:
        quota_id = quota if isinstance(quota, int) else quota.pk
        try:
            return self.quotas[quota_id]
        except KeyError:
            raise ValidationError({"quota": f"Quota {quota_id} does not exist (any more)."}) from None

    def parent_of(self, quota: Quota) -> Quota | None:
        return None if quota.parent_id is None else self.quotas.get(quota.parent_id)

    def children_of(self, quota: Quota | None) -> list[Quota]:
        """The roots when `quota` is None."""
        parent_id = None if quota is None else quota.pk
        return [child for child in self.quotas.values() if child.parent_id == parent_id]

    def siblings_with(self, quota: Quota) -> list[Quota]:
        """The quota and every other child of its parent (the roots, for a root)."""
        return [other for other in self.quotas.values() if other.parent_id == quota.parent_id]

    # -- the rules ---------------------------------------------------------------------------

    def validate(self, changed: Iterable[Quota], errors: _Errors) -> None:
        changed = list(changed)
        for quota in changed:
            _check_row(quota, errors)
        errors.raise_if_any()
        for quota in changed:
            self._check_place(quota, errors)
        errors.raise_if_any()
        parents_checked: set[int | None] = set()
        for quota in changed:
            if quota.parent_id not in parents_checked:
                parents_checked.add(quota.parent_id)
                self._check_room_under_parent(quota, changed, errors)
            self._check_room_for_children(quota, errors)
        errors.raise_if_any()

    def _check_place(self, quota: Quota, errors: _Errors) -> None:
        """No cycle, the parent in the same pool."""
        if quota.parent_id is None:
            return
        if quota.pk is not None and quota.parent_id == quota.pk:
            errors.add("parent", f"{quota.name} cannot be its own parent.")
            return
        parent = self.parent_of(quota)
        if parent is None:
            errors.add("parent", f"The parent of {quota.name} is not a quota of pool {self.pool.name}.")
            return
        seen: set[int] = set()
        ancestor: Quota | None = parent
        while ancestor is not None and ancestor.pk not in seen:
            if quota.pk is not None and ancestor.pk == quota.pk:
                errors.add(
                    "parent",
                    f"{quota.name} cannot move under {parent.name}: {parent.name} is inside the subtree of "
                    f"{quota.name}, which would make a cycle.",
                )
                return
            seen.add(ancestor.pk)
            ancestor = self.parent_of(ancestor)

    def _check_room_under_parent(self, quota: Quota, changed: list[Quota], errors: _Errors) -> None:
        """Children's guarantees add up to at most the parent's; the roots' to at most the pool's capacity."""
        parent = self.parent_of(quota)
        members = self.siblings_with(quota)
        if quota.pk is None:
            members.append(quota)
        for field, unit in RESOURCES:
            if parent is None:
                available: float = getattr(self.capacity, field)
                holder = f"the pool {self.pool.name}"
                left_for = "its root quotas"
            else:
                parent_amount = getattr(parent, field)
                if parent_amount is None:
                    if field != "gpus":
                        for member in members:
                            if getattr(member, field) is not None and member in changed:
                                errors.add(
                                    field,
                                    f"{member.name} sets {_amount(getattr(member, field), unit)} but its parent "
                                    f"{parent.name} guarantees no {unit}; give {parent.name} a {field} "
                                    "guarantee first.",
                                )
                    continue
                available = parent_amount
                holder = parent.name
                left_for = "its children"
            if parent is None and field != "gpus" and all(getattr(member, field) is None for member in members):
                continue
            total = sum(getattr(member, field) or 0 for member in members)
            if total <= available + _TOLERANCE:
                continue
            for member in members:
                if member not in changed:
                    continue
                needed = getattr(member, field) or 0
                others = total - needed
                left = available - others
                errors.add(
                    field,
                    f"{member.name} would need {_amount(needed, unit)} but {holder} has "
                    f"{_number(available)} − {_number(others)} = {_number(left)} left for {left_for}.",
                )

    def _check_room_for_children(self, quota: Quota, errors: _Errors) -> None:
        """A parent is never scaled below what its children already hold (that would break the sum rule)."""
        if quota.pk is None:
            return
        children = self.children_of(quota)
        if not children:
            return
        for field, unit in RESOURCES:
            held = [getattr(child, field) for child in children if getattr(child, field) is not None]
            if not held:
                continue
            own = getattr(quota, field)
            total = sum(held)
            if own is None:
                errors.add(
                    field,
                    f"{quota.name} cannot drop its {field} guarantee while its children hold {_amount(total, unit)}.",
                )
            elif total > own + _TOLERANCE:
                parts = " + ".join(_number(amount) for amount in held)
                errors.add(
                    field,
                    f"{quota.name} would guarantee {_amount(own, unit)} but its children hold "
                    f"{parts} = {_amount(total, unit)}; scale them down first.",
                )

    def check_capacity(self, capacity: _Capacity, errors: _Errors, field_for: Mapping[str, str], cause: str) -> None:
        """The roots' guarantees stay within a changed inventory."""
        roots = self.children_of(None)
        for field, unit in RESOURCES:
            guaranteed = [getattr(root, field) for root in roots if getattr(root, field) is not None]
            if not guaranteed:
                continue
            total = sum(guaranteed)
            new_capacity = getattr(capacity, field)
            if total > new_capacity + _TOLERANCE:
                errors.add(
                    field_for.get(field, field),
                    f"{cause} would leave the pool {self.pool.name} {_amount(new_capacity, unit)}, but its root "
                    f"quotas guarantee {_amount(total, unit)}.",
                )


def _check_row(quota: Quota, errors: _Errors) -> None:
    """The rules of one quota on its own: a name, amounts ≥ 0, limit ≥ gpus, a known queue policy."""
    name = quota.name
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A quota needs a name.")
    elif len(name) > bounds.NAME_MAX_LENGTH:
        errors.add(
            "name", f"A quota name has at most {bounds.NAME_MAX_LENGTH} characters; {name[:20]}… has {len(name)}."
        )
    elif name != name.strip():
        errors.add("name", f"The name {name!r} has spaces at its ends.")
    label = name if isinstance(name, str) and name.strip() else "the quota"
    for field, unit in (*RESOURCES, ("limit", "GPUs"), ("weight", "")):
        amount = getattr(quota, field)
        if amount is None and field != "gpus":
            continue
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
            errors.add(field, f"{field} of {label} must be a number, got {amount!r}.")
        elif amount < 0:
            what = f"{_number(amount)} {unit}".strip()
            errors.add(field, f"{field} of {label} must be at least 0, got {what}.")
        elif amount > _QUOTA_MAXIMA[field]:
            errors.add(
                field,
                f"{field} of {label} must be at most {bounds.readable(_QUOTA_MAXIMA[field])}, "
                f"got {bounds.readable(amount)}.",
            )
    limit, guaranteed = quota.limit, quota.gpus
    if _is_number(limit) and _is_number(guaranteed) and limit is not None and limit < guaranteed - _TOLERANCE:
        errors.add(
            "limit",
            f"The limit of {label} ({_amount(limit, 'GPUs')}) is below its guarantee of "
            f"{_amount(guaranteed, 'GPUs')}; the limit must be at least gpus.",
        )
    if isinstance(quota.rank, bool) or not isinstance(quota.rank, int):
        errors.add("rank", f"rank of {label} must be a whole number, got {quota.rank!r}.")
    elif abs(quota.rank) > bounds.QUOTA_RANK_MAX:
        side = "at most " if quota.rank > 0 else "at least -"
        errors.add(
            "rank",
            f"rank of {label} must be {side}{bounds.readable(bounds.QUOTA_RANK_MAX)}, "
            f"got {bounds.readable(quota.rank)}.",
        )
    runtime = quota.min_runtime_seconds
    if runtime is not None and (isinstance(runtime, bool) or not isinstance(runtime, int) or runtime < 0):
        errors.add(
            "min_runtime_seconds", f"min_runtime_seconds of {label} must be a whole number ≥ 0, got {runtime!r}."
        )
    elif runtime is not None and runtime > bounds.MIN_RUNTIME_SECONDS_MAX:
        errors.add(
            "min_runtime_seconds",
            f"min_runtime_seconds of {label} must be at most {bounds.readable(bounds.MIN_RUNTIME_SECONDS_MAX)} "
            f"(a year), got {bounds.readable(runtime)}.",
        )
    if quota.queue_policy not in QueuePolicy.values:
        errors.add(
            "queue_policy",
            f"queue_policy {quota.queue_policy!r} is not one of {', '.join(QueuePolicy.values)}.",
        )
    for switch in ("child_preemption", "same_level_preemption"):
        if not isinstance(getattr(quota, switch), bool):
            errors.add(switch, f"{switch} must be true or false, got {getattr(quota, switch)!r}.")


def _is_number(amount: object) -> bool:
    return isinstance(amount, (int, float)) and not isinstance(amount, bool) and math.isfinite(amount)


def _check_name_free(name: str, *, quota_id: int | None, errors: _Errors) -> None:
    others = Quota.objects.filter(name=name)
    if quota_id is not None:
        others = others.exclude(pk=quota_id)
    if isinstance(name, str) and others.exists():
        errors.add("name", f"A quota named {name!r} already exists; quota names are unique.")


def _resolve_parent(parent: Quota | str | None) -> Quota | None:
    if parent is None or isinstance(parent, Quota):
        return parent
    found = Quota.objects.filter(name=parent).first()
    if found is None:
        raise ValidationError({"parent": f"There is no quota named {parent!r}."})
    return found


def quota_snapshot(quota: Quota, tree: _Tree | None = None) -> dict[str, Any]:
    """The fields of a quota as the API and the audit log show them (parent by name)."""
    parent_name: str | None = None
    if quota.parent_id is not None:
        parent = tree.quotas.get(quota.parent_id) if tree is not None else quota.parent
        parent_name = parent.name if parent is not None else None
    values: dict[str, Any] = {field: getattr(quota, field) for field in QUOTA_FIELDS if field != "parent"}
    values["parent"] = parent_name
    return values


def _save(quota: Quota) -> None:
    # The rules were checked on the tree; this turns a lost race on the name into the same 400.
    try:
        with transaction.atomic():
            quota.save()
    except IntegrityError:
        raise ValidationError(
            {"name": f"A quota named {quota.name!r} already exists; quota names are unique."}
        ) from None


# --------------------------------------------------------------------------------------------
# Quota operations
# --------------------------------------------------------------------------------------------


@overload
def create_quota(
    *,
    actor: Actor,
    name: str,
    parent: Quota | str | None = ...,
    pool: ResourcePool | None = ...,
    dry_run: Literal[False] = ...,
    **settings: Unpack[QuotaSettings],
) -> Quota: ...
@overload
def create_quota(
    *,
    actor: Actor,
    name: str,
    parent: Quota | str | None = ...,
    pool: ResourcePool | None = ...,
    dry_run: Literal[True],
    **settings: Unpack[QuotaSettings],
) -> DryRunResult: ...
@overload
def create_quota(
    *,
    actor: Actor,
    name: str,
    parent: Quota | str | None = ...,
    pool: ResourcePool | None = ...,
    dry_run: bool,
    **settings: Unpack[QuotaSettings],
) -> Quota | DryRunResult: ...
def create_quota(
    *,
    actor: Actor,
    name: str,
    parent: Quota | str | None = None,
    pool: ResourcePool | None = None,
    dry_run: bool = False,
    **settings: Unpack[QuotaSettings],
) -> Quota | DryRunResult:
    """A root (no parent: in `pool`, the default pool when None) or a child of `parent` (a quota or its name)."""
    _require_platform_admin(actor, "create quotas")

    def apply() -> Quota:
        with transaction.atomic():
            parent_quota = _resolve_parent(parent)
            pool_id = parent_quota.pool_id if parent_quota is not None else _pool_or_default(pool).pk
            tree = _Tree.locked(pool_id)
            quota = Quota(
                pool_id=pool_id,
                name=name,
                parent=tree.get(parent_quota) if parent_quota is not None else None,
                **settings,
            )
            errors = _Errors()
            _check_name_free(name, quota_id=None, errors=errors)
            tree.validate([quota], errors)
            _save(quota)
            tree.quotas[quota.pk] = quota
            audit.record(
                actor=actor,
                action="quota.create",
                object_type="quota",
                object_id=quota.pk,
                object_repr=quota.name,
                after=quota_snapshot(quota, tree),
            )
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.create", quota_ids=[quota.pk])
            return quota

    if dry_run:
        return _dry_run(apply, pool_id=None)
    return apply()


@dataclass(frozen=True, slots=True)
class NewQuota:
    """One quota of a tree created at once: `parent` names a quota listed before it, or one that
    already exists in the pool; None makes a root. The defaults are create_quota's."""

    name: str
    parent: str | None = None
    gpus: float = 0
    cpu: float | None = None
    memory_gib: float | None = None
    limit: float | None = None
    weight: float | None = None
    rank: int = 0
    child_preemption: bool = False
    same_level_preemption: bool = False
    queue_policy: str = QueuePolicy.BEST_EFFORT
    min_runtime_seconds: int | None = None


def create_quota_tree(*, actor: Actor, quotas: Sequence[NewQuota], pool: ResourcePool | None = None) -> list[Quota]:
    """Many quotas at once (a whole tree, or subtrees under existing quotas), all or nothing.

    The same rules and messages as `create_quota`, checked once for the whole set against the
    pool's tree (locked as create_quota locks it): names present and unique (in the set and in
    the database), amounts ≥ 0, limit ≥ gpus, parents known and in the pool, children's
    guarantees within their parent's, roots' within the pool's capacity. Then one insert per
    level of the tree and one audit record (`quota.create_tree`). Returns the quotas in the
    order given.
    """
    _require_platform_admin(actor, "create quotas")
    if not quotas:
        return []
    with transaction.atomic():
        pool_id = _pool_or_default(pool).pk
        tree = _Tree.locked(pool_id)
        existing = {quota.name: quota for quota in tree.quotas.values()}
        errors = _Errors()
        # Provisional negative ids let the tree's own rules see the new quotas beside the old.
        provisional: dict[str, Quota] = {}
        new: list[Quota] = []
        for number, spec in enumerate(quotas, start=1):
            quota = Quota(
                pk=-number,
                pool_id=pool_id,
                name=spec.name,
                gpus=spec.gpus,
                cpu=spec.cpu,
                memory_gib=spec.memory_gib,
                limit=spec.limit,
                weight=spec.weight,
                rank=spec.rank,
                child_preemption=spec.child_preemption,
                same_level_preemption=spec.same_level_preemption,
                queue_policy=spec.queue_policy,
                min_runtime_seconds=spec.min_runtime_seconds,
            )
            if spec.parent is not None:
                parent = provisional.get(spec.parent) or existing.get(spec.parent)
                if parent is not None:
                    quota.parent_id = parent.pk
                elif any(other.name == spec.parent for other in quotas[number:]):
                    errors.add("parent", f"The parent of {spec.name}, {spec.parent}, must come before it.")
                elif Quota.objects.filter(name=spec.parent).exists():
                    errors.add("parent", f"The parent of {spec.name} is not a quota of pool {tree.pool.name}.")
                else:
                    errors.add("parent", f"There is no quota named {spec.parent!r}.")
            if isinstance(spec.name, str):
                if spec.name in provisional or spec.name in existing:
                    errors.add("name", f"A quota named {spec.name!r} already exists; quota names are unique.")
                else:
                    provisional[spec.name] = quota
            new.append(quota)
        taken = set(
            Quota.objects.filter(name__in=[name for name in provisional if name not in existing]).values_list(
                "name", flat=True
            )
        )
        for name in sorted(taken):  # in another pool
            errors.add("name", f"A quota named {name!r} already exists; quota names are unique.")
        for quota in new:
            _check_row(quota, errors)
        errors.raise_if_any()
        for quota in new:
            tree.quotas[quota.pk] = quota
        for quota in new:
            tree._check_place(quota, errors)
        errors.raise_if_any()
        parents_checked: set[int | None] = set()
        for quota in new:
            if quota.parent_id not in parents_checked:
                parents_checked.add(quota.parent_id)
                tree._check_room_under_parent(quota, new, errors)
        errors.raise_if_any()

        # One insert per level: a level's parents have their real ids by then.
        real_id: dict[int, int] = {quota.pk: quota.pk for quota in existing.values()}
        remaining = new
        while remaining:
            level = [quota for quota in remaining if quota.parent_id is None or quota.parent_id in real_id]
            assert level, "validated parents always come first"
            provisional_ids = [quota.pk for quota in level]
            for quota in level:
                quota.pk = None
                if quota.parent_id is not None:
                    quota.parent_id = real_id[quota.parent_id]
            try:
                with transaction.atomic():
                    Quota.objects.bulk_create(level)
            except IntegrityError:
                raise ValidationError(
                    {"name": "A quota of this tree already exists (created meanwhile); quota names are unique."}
                ) from None
            for old_id, quota in zip(provisional_ids, level, strict=True):
                real_id[old_id] = quota.pk
            remaining = [quota for quota in remaining if quota.pk < 0]  # not inserted yet
        names = {quota.pk: quota.name for quota in [*existing.values(), *new]}
        audit.record(
            actor=actor,
            action="quota.create_tree",
            object_type="quota",
            object_id=pool_id,
            object_repr=f"{len(new)} quotas in pool {tree.pool.name}",
            after={
                "quotas": [
                    {
                        **{field: getattr(quota, field) for field in QUOTA_FIELDS if field != "parent"},
                        "parent": names.get(quota.parent_id) if quota.parent_id is not None else None,
                    }
                    for quota in new
                ]
            },
        )
        _on_commit_send(
            signals.quota_tree_changed, Quota, action="quota.create_tree", quota_ids=[quota.pk for quota in new]
        )
        return new


@overload
def update_quota(
    *, actor: Actor, quota: Quota, dry_run: Literal[False] = ..., **changes: Unpack[QuotaChanges]
) -> Quota: ...
@overload
def update_quota(
    *, actor: Actor, quota: Quota, dry_run: Literal[True], **changes: Unpack[QuotaChanges]
) -> DryRunResult: ...
@overload
def update_quota(
    *, actor: Actor, quota: Quota, dry_run: bool, **changes: Unpack[QuotaChanges]
) -> Quota | DryRunResult: ...
def update_quota(
    *, actor: Actor, quota: Quota, dry_run: bool = False, **changes: Unpack[QuotaChanges]
) -> Quota | DryRunResult:
    """Change any field: rename, move under another parent, scale, switches, policy, weight, rank, limit.

    Fields not named keep their value; naming one with None unsets it (no limit, weight that
    follows gpus, min runtime inherited).
    """
    _require_platform_admin(actor, "change quotas")
    unknown = set(changes) - set(QUOTA_FIELDS)

    def apply() -> Quota:
        if unknown:
            raise ValidationError({field: f"{field} is not a field of a quota." for field in sorted(unknown)})
        with transaction.atomic():
            tree = _Tree.locked(quota.pool_id)
            current = tree.get(quota)
            before = quota_snapshot(current, tree)
            errors = _Errors()
            for field, value in changes.items():
                if field == "parent":
                    new_parent = _resolve_parent(value)  # type: ignore[arg-type]
                    if new_parent is not None and new_parent.pool_id != current.pool_id:
                        errors.add("parent", f"{new_parent.name} is in another resource pool than {current.name}.")
                        continue
                    current.parent_id = None if new_parent is None else new_parent.pk
                elif field in ("name", "gpus") and value is None:
                    errors.add(field, f"{field} of {current.name} cannot be empty.")
                else:
                    setattr(current, field, value)
            errors.raise_if_any()
            if "name" in changes:
                _check_name_free(current.name, quota_id=current.pk, errors=errors)
            tree.validate([current], errors)
            after = quota_snapshot(current, tree)
            changed_fields = [field for field in QUOTA_FIELDS if before[field] != after[field]]
            if changed_fields:
                _save(current)
                audit.record(
                    actor=actor,
                    action="quota.update",
                    object_type="quota",
                    object_id=current.pk,
                    object_repr=current.name,
                    before={field: before[field] for field in changed_fields},
                    after={field: after[field] for field in changed_fields},
                )
                _on_commit_send(
                    signals.quota_tree_changed,
                    Quota,
                    action="quota.update",
                    quota_ids=[current.pk],
                    fields=changed_fields,
                )
            return current

    if dry_run:
        return _dry_run(apply, pool_id=quota.pool_id)
    return apply()


@overload
def scale_quota(
    *,
    actor: Actor,
    quota: Quota,
    gpus: float | None = ...,
    cpu: float | None = ...,
    memory_gib: float | None = ...,
    dry_run: Literal[False] = ...,
) -> Quota: ...
@overload
def scale_quota(
    *,
    actor: Actor,
    quota: Quota,
    gpus: float | None = ...,
    cpu: float | None = ...,
    memory_gib: float | None = ...,
    dry_run: Literal[True],
) -> DryRunResult: ...
@overload
def scale_quota(
    *,
    actor: Actor,
    quota: Quota,
    gpus: float | None = ...,
    cpu: float | None = ...,
    memory_gib: float | None = ...,
    dry_run: bool,
) -> Quota | DryRunResult: ...
def scale_quota(
    *,
    actor: Actor,
    quota: Quota,
    gpus: float | None = None,
    cpu: float | None = None,
    memory_gib: float | None = None,
    dry_run: bool = False,
) -> Quota | DryRunResult:
    """Set new guarantees (absolute amounts; None leaves a resource as it is).

    Up needs room in the parent (the pool, for a root); down is allowed unless the quota's own
    children already hold more than the new amount.
    """
    _require_platform_admin(actor, "scale quotas")
    amounts = {field: amount for field, amount in (("gpus", gpus), ("cpu", cpu), ("memory_gib", memory_gib))}
    amounts = {field: amount for field, amount in amounts.items() if amount is not None}

    def apply() -> Quota:
        if not amounts:
            raise ValidationError({"gpus": "Name at least one of gpus, cpu, memory_gib to scale."})
        with transaction.atomic():
            tree = _Tree.locked(quota.pool_id)
            current = tree.get(quota)
            before = {field: getattr(current, field) for field in amounts}
            for field, amount in amounts.items():
                setattr(current, field, amount)
            tree.validate([current], _Errors())
            _save(current)
            audit.record(
                actor=actor,
                action="quota.scale",
                object_type="quota",
                object_id=current.pk,
                object_repr=current.name,
                before=before,
                after=dict(amounts),
            )
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.scale", quota_ids=[current.pk])
            return current

    if dry_run:
        return _dry_run(apply, pool_id=quota.pool_id)
    return apply()


@overload
def transfer_quota(
    *,
    actor: Actor,
    source: Quota,
    target: Quota,
    gpus: float = ...,
    cpu: float = ...,
    memory_gib: float = ...,
    dry_run: Literal[False] = ...,
) -> tuple[Quota, Quota]: ...
@overload
def transfer_quota(
    *,
    actor: Actor,
    source: Quota,
    target: Quota,
    gpus: float = ...,
    cpu: float = ...,
    memory_gib: float = ...,
    dry_run: Literal[True],
) -> DryRunResult: ...
@overload
def transfer_quota(
    *,
    actor: Actor,
    source: Quota,
    target: Quota,
    gpus: float = ...,
    cpu: float = ...,
    memory_gib: float = ...,
    dry_run: bool,
) -> tuple[Quota, Quota] | DryRunResult: ...
def transfer_quota(
    *,
    actor: Actor,
    source: Quota,
    target: Quota,
    gpus: float = 0,
    cpu: float = 0,
    memory_gib: float = 0,
    dry_run: bool = False,
) -> tuple[Quota, Quota] | DryRunResult:
    """Move guarantee from `source` to its sibling `target` in one step (PAI: 80→72 and 48→56 at once).

    Returns (source, target) as they are after the move.
    """
    _require_platform_admin(actor, "transfer quota")
    amounts = {"gpus": gpus, "cpu": cpu, "memory_gib": memory_gib}

    def apply() -> tuple[Quota, Quota]:
        errors = _Errors()
        for field, amount in amounts.items():
            if not _is_number(amount):
                errors.add(field, f"The {field} to transfer must be a number, got {amount!r}.")
            elif amount < 0:
                errors.add(field, f"The {field} to transfer must be at least 0, got {_number(amount)}.")
        errors.raise_if_any()
        if all(amount == 0 for amount in amounts.values()):
            raise ValidationError({"gpus": "A transfer must move something: gpus, cpu and memory_gib are all 0."})
        if source.pk == target.pk:
            raise ValidationError({"to": f"{source.name} cannot transfer to itself."})
        if source.pool_id != target.pool_id:
            raise ValidationError({"to": f"{target.name} is in another resource pool than {source.name}."})
        with transaction.atomic():
            tree = _Tree.locked(source.pool_id)
            giver = tree.get(source)
            taker = tree.get(target)
            if taker.parent_id != giver.parent_id:
                giver_parent = tree.parent_of(giver)
                taker_parent = tree.parent_of(taker)
                raise ValidationError(
                    {
                        "to": f"{taker.name} is not a sibling of {giver.name}: their parents are "
                        f"{taker_parent.name if taker_parent else 'none (a root)'} and "
                        f"{giver_parent.name if giver_parent else 'none (a root)'}; transfers move guarantee "
                        "between quotas of one parent."
                    }
                )
            before = {giver.name: {}, taker.name: {}}  # type: dict[str, dict[str, float | None]]
            after = {giver.name: {}, taker.name: {}}  # type: dict[str, dict[str, float | None]]
            move_errors = _Errors()
            for field, amount in amounts.items():
                if amount == 0:
                    continue
                unit = _unit(field)
                has = getattr(giver, field)
                if has is None:
                    move_errors.add(field, f"{giver.name} has no {field} guarantee to give.")
                    continue
                if amount > has + _TOLERANCE:
                    move_errors.add(
                        field, f"{giver.name} has {_amount(has, unit)}; it cannot give {_amount(amount, unit)}."
                    )
                    continue
                before[giver.name][field] = has
                before[taker.name][field] = getattr(taker, field)
                setattr(giver, field, max(0.0, has - amount))
                setattr(taker, field, (getattr(taker, field) or 0) + amount)
                after[giver.name][field] = getattr(giver, field)
                after[taker.name][field] = getattr(taker, field)
            move_errors.raise_if_any()
            tree.validate([giver, taker], _Errors())
            _save(giver)
            _save(taker)
            audit.record(
                actor=actor,
                action="quota.transfer",
                object_type="quota",
                object_id=giver.pk,
                object_repr=f"{giver.name} → {taker.name}",
                before=before,
                after=after,
            )
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.transfer", quota_ids=[giver.pk, taker.pk])
            return giver, taker

    if dry_run:
        return _dry_run(apply, pool_id=source.pool_id)
    return apply()


def _quota_holders(quota: Quota) -> list[str]:
    """Why a quota must stay: children, bound workspaces, live jobs, and what higher apps register."""
    reasons: list[str] = []
    children = list(Quota.objects.filter(parent=quota).order_by("id").values_list("name", flat=True))
    if children:
        reasons.append(
            f"{quota.name} has {len(children)} child quota(s) ({', '.join(children[:5])}); delete them first."
        )
    # Bound workspaces and live jobs belong to the apps above, which register guards (they know
    # what binds and what is live); their PROTECT foreign keys stay as the last line.
    reasons.extend(reason for reason in hooks.quota_delete_blockers(quota) if reason not in reasons)
    return reasons


def _still_referred(name: str, protected: ProtectedError) -> str:
    """What a foreign key with PROTECT still holds, e.g. finished jobs that keep their quota for history."""
    counts: dict[str, int] = defaultdict(int)
    for row in protected.protected_objects:
        counts[str(type(row)._meta.verbose_name_plural)] += 1
    held = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
    return f"{name} is still referred to by {held}."


def _delete_audited(*, actor: Actor, row: Quota | Node, field: str, before: dict[str, Any]) -> int:
    """Delete a quota or node whose guards passed, and audit it (`<field>.delete`); returns its id.

    A PROTECT reference nobody guarded (a finished job's history, say) is the last line of
    defence: it becomes a ValidationError on `field` naming what still refers to the row.
    """
    row_id: int = row.pk
    try:
        with transaction.atomic():
            row.delete()
    except ProtectedError as protected:
        raise ValidationError({field: _still_referred(before["name"], protected)}) from None
    audit.record(
        actor=actor,
        action=f"{field}.delete",
        object_type=field,
        object_id=row_id,
        object_repr=before["name"],
        before=before,
    )
    return row_id


@overload
def delete_quota(*, actor: Actor, quota: Quota, dry_run: Literal[False] = ...) -> None: ...
@overload
def delete_quota(*, actor: Actor, quota: Quota, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def delete_quota(*, actor: Actor, quota: Quota, dry_run: bool) -> DryRunResult | None: ...
def delete_quota(*, actor: Actor, quota: Quota, dry_run: bool = False) -> DryRunResult | None:
    """Refused while the quota has children, bound workspaces or live jobs."""
    _require_platform_admin(actor, "delete quotas")

    def apply() -> None:
        with transaction.atomic():
            tree = _Tree.locked(quota.pool_id)
            current = tree.get(quota)
            reasons = _quota_holders(current)
            if reasons:
                raise ValidationError({"quota": reasons})
            quota_id = _delete_audited(actor=actor, row=current, field="quota", before=quota_snapshot(current, tree))
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.delete", quota_ids=[quota_id])

    if dry_run:
        return _dry_run(apply, pool_id=quota.pool_id)
    apply()
    return None


# --------------------------------------------------------------------------------------------
# Inventory: nodes and their GPU devices
# --------------------------------------------------------------------------------------------


def node_snapshot(node: Node) -> dict[str, Any]:
    return {field: getattr(node, field) for field in NODE_FIELDS}


def _check_node(node: Node, errors: _Errors) -> None:
    name = node.name
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A node needs a name.")
    elif len(name) > bounds.NAME_MAX_LENGTH:
        errors.add(
            "name", f"A node name has at most {bounds.NAME_MAX_LENGTH} characters; {name[:20]}… has {len(name)}."
        )
    label = name if isinstance(name, str) and name.strip() else "the node"
    if isinstance(node.gpus, bool) or not isinstance(node.gpus, int) or node.gpus < 0:
        errors.add("gpus", f"gpus of {label} must be a whole number of devices ≥ 0, got {node.gpus!r}.")
    elif node.gpus > bounds.NODE_GPUS_MAX:
        # Checked before any device is built: one row per GPU is what made 10^9 GPUs take 23 GB.
        errors.add(
            "gpus",
            f"gpus of {label} must be at most {bounds.NODE_GPUS_MAX} (the most a node holds), "
            f"got {bounds.readable(node.gpus)}.",
        )
    for field in ("cpu", "memory_gib"):
        amount = getattr(node, field)
        if not _is_number(amount):
            errors.add(field, f"{field} of {label} must be a number, got {amount!r}.")
        elif amount < 0:
            errors.add(field, f"{field} of {label} must be at least 0, got {_number(amount)}.")
        elif amount > _NODE_MAXIMA[field]:
            errors.add(
                field,
                f"{field} of {label} must be at most {bounds.readable(_NODE_MAXIMA[field])}, "
                f"got {bounds.readable(amount)}.",
            )
    if not isinstance(node.gpu_model, str):
        errors.add("gpu_model", f"gpu_model of {label} must be text, got {node.gpu_model!r}.")
    elif len(node.gpu_model) > bounds.GPU_MODEL_MAX_LENGTH:
        errors.add(
            "gpu_model",
            f"gpu_model of {label} has at most {bounds.GPU_MODEL_MAX_LENGTH} characters, got {len(node.gpu_model)}.",
        )
    if not isinstance(node.labels, dict):
        errors.add("labels", f"labels of {label} must be a mapping of names to values, got {node.labels!r}.")
    else:
        _check_labels(node.labels, label, errors)
    if node.state not in NodeState.values:
        errors.add("state", f"state {node.state!r} of {label} is not one of {', '.join(NodeState.values)}.")


def _check_labels(labels: dict[str, Any], label: str, errors: _Errors) -> None:
    if len(labels) > bounds.NODE_LABELS_MAX:
        errors.add("labels", f"labels of {label} hold at most {bounds.NODE_LABELS_MAX} entries, got {len(labels)}.")
        return
    for key, value in labels.items():
        if len(key) > bounds.LABEL_KEY_MAX_LENGTH:
            errors.add(
                "labels",
                f"a label name of {label} has at most {bounds.LABEL_KEY_MAX_LENGTH} characters; "
                f"{key[:20]}… has {len(key)}.",
            )
        elif len(str(value)) > bounds.LABEL_VALUE_MAX_LENGTH:
            errors.add(
                "labels",
                f"the label {key!r} of {label} has at most {bounds.LABEL_VALUE_MAX_LENGTH} characters, "
                f"got {len(str(value))}.",
            )


def _sync_devices(node: Node) -> None:
    """One GpuDevice per GPU, indices 0..gpus-1, each of the node's model (new nodes get theirs
    in _create_nodes)."""
    node.devices.filter(index__gte=node.gpus).delete()
    existing = set(node.devices.values_list("index", flat=True))
    GpuDevice.objects.bulk_create(
        [GpuDevice(node=node, index=index, model=node.gpu_model) for index in range(node.gpus) if index not in existing]
    )
    node.devices.exclude(model=node.gpu_model).update(model=node.gpu_model)


def _capacity_after(tree: _Tree, before: Mapping[str, Any], replacement: Node | None) -> _Capacity:
    """The pool's capacity once the node stored as `before` is replaced (or removed, with None)."""
    capacity = _Capacity(tree.capacity.gpus, tree.capacity.cpu, tree.capacity.memory_gib)
    for field in ("gpus", "cpu", "memory_gib"):
        new = getattr(replacement, field) if replacement is not None else 0
        setattr(capacity, field, getattr(capacity, field) - before[field] + new)
    return capacity


def _save_node(node: Node) -> None:
    try:
        with transaction.atomic():
            node.save()
    except IntegrityError:
        raise ValidationError({"name": f"A node named {node.name!r} already exists; node names are unique."}) from None


@overload
def create_node(
    *,
    actor: Actor,
    name: str,
    gpus: int,
    cpu: float = ...,
    memory_gib: float = ...,
    gpu_model: str = ...,
    labels: dict[str, Any] | None = ...,
    state: str = ...,
    pool: ResourcePool | None = ...,
    executor: str = ...,
    dry_run: Literal[False] = ...,
) -> Node: ...
@overload
def create_node(
    *,
    actor: Actor,
    name: str,
    gpus: int,
    cpu: float = ...,
    memory_gib: float = ...,
    gpu_model: str = ...,
    labels: dict[str, Any] | None = ...,
    state: str = ...,
    pool: ResourcePool | None = ...,
    executor: str = ...,
    dry_run: Literal[True],
) -> DryRunResult: ...
@overload
def create_node(
    *,
    actor: Actor,
    name: str,
    gpus: int,
    cpu: float = ...,
    memory_gib: float = ...,
    gpu_model: str = ...,
    labels: dict[str, Any] | None = ...,
    state: str = ...,
    pool: ResourcePool | None = ...,
    executor: str = ...,
    dry_run: bool,
) -> Node | DryRunResult: ...
def create_node(
    *,
    actor: Actor,
    name: str,
    gpus: int,
    cpu: float = 0,
    memory_gib: float = 0,
    gpu_model: str = "",
    labels: dict[str, Any] | None = None,
    state: str = NodeState.READY,
    pool: ResourcePool | None = None,
    dry_run: bool = False,
    executor: str = NodeExecutor.SIMULATED,
) -> Node | DryRunResult:
    """A node of `pool` (the default pool when None) with its GPU devices 0..gpus-1."""
    _require_platform_admin(actor, "change the inventory")
    spec = NewNode(
        name=name,
        gpus=gpus,
        cpu=cpu,
        memory_gib=memory_gib,
        gpu_model=gpu_model,
        labels=labels,
        state=state,
        executor=executor,
    )

    def apply() -> Node:
        (node,) = _create_nodes(actor=actor, pool=pool, nodes=[spec], name_nodes=False)
        return node

    if dry_run:
        return _dry_run(apply, pool_id=None)
    return apply()


@dataclass(frozen=True, slots=True)
class NewNode:
    """One node of `create_nodes`; the defaults are create_node's."""

    name: str
    gpus: int
    cpu: float = 0
    memory_gib: float = 0
    gpu_model: str = ""
    labels: dict[str, Any] | None = None
    state: str = NodeState.READY
    executor: str = NodeExecutor.SIMULATED


def create_nodes(*, actor: Actor, nodes: Sequence[NewNode], pool: ResourcePool | None = None) -> list[Node]:
    """Many nodes of `pool` at once (a cluster's inventory), all or nothing.

    The same rules, messages and audit records (one `node.create` per node) as `create_node`,
    each message prefixed with the node's position (`nodes[3]: ...`); names must also differ
    within the set. Then one insert of the nodes and one of their devices, and one
    `inventory_changed` after commit naming them all. Returns the nodes in the order given.
    """
    _require_platform_admin(actor, "change the inventory")
    return _create_nodes(actor=actor, pool=pool, nodes=nodes, name_nodes=True)


def _create_nodes(*, actor: Actor, pool: ResourcePool | None, nodes: Sequence[NewNode], name_nodes: bool) -> list[Node]:
    if not nodes:
        return []
    with transaction.atomic():
        pool_id = _pool_or_default(pool).pk
        _lock_pool(pool_id)
        new = [
            Node(
                pool_id=pool_id,
                name=spec.name,
                gpus=spec.gpus,
                cpu=spec.cpu,
                memory_gib=spec.memory_gib,
                gpu_model=spec.gpu_model,
                labels={} if spec.labels is None else spec.labels,
                state=spec.state,
                executor=spec.executor,
            )
            for spec in nodes
        ]
        names = [node.name for node in new if isinstance(node.name, str)]
        taken = set(Node.objects.filter(name__in=names).values_list("name", flat=True))
        errors = _Errors()
        seen: dict[str, int] = {}
        for position, node in enumerate(new):
            node_errors = _Errors()
            _check_node(node, node_errors)
            if isinstance(node.name, str):
                if node.name in taken:
                    node_errors.add("name", f"A node named {node.name!r} already exists; node names are unique.")
                elif node.name in seen:
                    node_errors.add(
                        "name", f"A node named {node.name!r} is also nodes[{seen[node.name]}]; node names are unique."
                    )
                seen.setdefault(node.name, position)
            for field, messages in node_errors.by_field.items():
                for message in messages:
                    errors.add(field, f"nodes[{position}]: {message}" if name_nodes else message)
        errors.raise_if_any()
        try:
            with transaction.atomic():
                Node.objects.bulk_create(new)
        except IntegrityError:
            # The names were free when checked; a concurrent writer took one meanwhile.
            raise ValidationError(
                {"name": f"A node named {new[0].name!r} already exists; node names are unique."}
                if len(new) == 1
                else {"name": "A node of this set already exists (created meanwhile); node names are unique."}
            ) from None
        GpuDevice.objects.bulk_create(
            [GpuDevice(node=node, index=index, model=node.gpu_model) for node in new for index in range(node.gpus)]
        )
        audit.record_all(
            [
                audit.build(
                    actor=actor,
                    action="node.create",
                    object_type="node",
                    object_id=node.pk,
                    object_repr=node.name,
                    after=node_snapshot(node),
                )
                for node in new
            ]
        )
        _on_commit_send(signals.inventory_changed, Node, action="node.create", node_ids=[node.pk for node in new])
        return new


@overload
def update_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ..., **changes: Unpack[NodeChanges]) -> Node: ...
@overload
def update_node(
    *, actor: Actor, node: Node, dry_run: Literal[True], **changes: Unpack[NodeChanges]
) -> DryRunResult: ...
@overload
def update_node(*, actor: Actor, node: Node, dry_run: bool, **changes: Unpack[NodeChanges]) -> Node | DryRunResult: ...
def update_node(
    *, actor: Actor, node: Node, dry_run: bool = False, **changes: Unpack[NodeChanges]
) -> Node | DryRunResult:
    """Change a node; fewer GPUs (or CPU, memory) is refused while the roots' guarantees need them."""
    _require_platform_admin(actor, "change the inventory")
    unknown = set(changes) - set(NODE_FIELDS)

    def apply() -> Node:
        if unknown:
            raise ValidationError({field: f"{field} is not a field of a node." for field in sorted(unknown)})
        with transaction.atomic():
            tree = _Tree.locked(node.pool_id)
            current = Node.objects.select_for_update().get(pk=node.pk)
            before = node_snapshot(current)
            for field, value in changes.items():
                setattr(current, field, value)
            errors = _Errors()
            _check_node(current, errors)
            if "name" in changes and Node.objects.filter(name=current.name).exclude(pk=current.pk).exists():
                errors.add("name", f"A node named {current.name!r} already exists; node names are unique.")
            errors.raise_if_any()
            tree.check_capacity(
                _capacity_after(tree, before, current),
                errors,
                {},
                f"Changing {before['name']} from {_amount(before['gpus'], 'GPUs')} to {_amount(current.gpus, 'GPUs')}"
                if before["gpus"] != current.gpus
                else f"Changing {before['name']}",
            )
            errors.raise_if_any()
            after = node_snapshot(current)
            changed_fields = [field for field in NODE_FIELDS if before[field] != after[field]]
            if changed_fields:
                _save_node(current)
                _sync_devices(current)
                action = "node.update"
                if changed_fields == ["state"]:
                    action = {NodeState.NOT_READY: "node.down", NodeState.READY: "node.up"}.get(
                        NodeState(current.state), f"node.{current.state}"
                    )
                audit.record(
                    actor=actor,
                    action=action,
                    object_type="node",
                    object_id=current.pk,
                    object_repr=current.name,
                    before={field: before[field] for field in changed_fields},
                    after={field: after[field] for field in changed_fields},
                )
                _on_commit_send(signals.inventory_changed, Node, action=action, node_ids=[current.pk])
            return current

    if dry_run:
        return _dry_run(apply, pool_id=node.pool_id)
    return apply()


@overload
def set_node_state(*, actor: Actor, node: Node, state: str, dry_run: Literal[False] = ...) -> Node: ...
@overload
def set_node_state(*, actor: Actor, node: Node, state: str, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def set_node_state(*, actor: Actor, node: Node, state: str, dry_run: bool) -> Node | DryRunResult: ...
def set_node_state(*, actor: Actor, node: Node, state: str, dry_run: bool = False) -> Node | DryRunResult:
    """Mark a node `down` (its GPUs leave the cluster the scheduler places on) or `ready` again.

    Guarantees stay as they are: they count every node of the pool, ready or not.
    """
    return update_node(actor=actor, node=node, state=state, dry_run=dry_run)


def _change_schedulability(*, actor: Actor, node: Node, state: str, verb: str, dry_run: bool) -> Node | DryRunResult:
    """Cordon, drain or uncordon: the node's state alone, audited as `node.<verb>`.

    A node that is not ready is refused: it is down, so it takes nothing new and its jobs have
    gone already; `up` (set_node_state) brings it back. Asking for the state the node is in
    changes nothing and writes no audit record (a second click is harmless).
    """
    _require_platform_admin(actor, f"{verb} nodes")

    def apply() -> Node:
        with transaction.atomic():
            _lock_pool(node.pool_id)
            current = Node.objects.select_for_update().get(pk=node.pk)
            if current.state == NodeState.NOT_READY:
                raise ValidationError(
                    {
                        "state": f"{current.name} is not ready (down), so it cannot be {verb}ed; "
                        "mark it up first, or leave it down: it takes no new jobs either way."
                    }
                )
            if current.state == state:
                return current
            before = current.state
            current.state = state
            current.save(update_fields=["state"])
            action = f"node.{verb}"
            audit.record(
                actor=actor,
                action=action,
                object_type="node",
                object_id=current.pk,
                object_repr=current.name,
                before={"state": before},
                after={"state": state},
            )
            # The scheduling app answers this with a cycle, which evicts what a drain asks to.
            _on_commit_send(signals.inventory_changed, Node, action=action, node_ids=[current.pk])
            return current

    if dry_run:
        return _dry_run(apply, pool_id=node.pool_id)
    return apply()


@overload
def cordon_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> Node: ...
@overload
def cordon_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def cordon_node(*, actor: Actor, node: Node, dry_run: bool) -> Node | DryRunResult: ...
def cordon_node(*, actor: Actor, node: Node, dry_run: bool = False) -> Node | DryRunResult:
    """No new job is placed on the node; the jobs on it run on (maintenance ahead, a flaky GPU).

    Its idle GPUs leave the capacity fair share divides; what its jobs hold still counts
    (docs/scheduling.md, "Node states"). A draining node that is cordoned stops draining.
    """
    return _change_schedulability(actor=actor, node=node, state=NodeState.CORDONED, verb="cordon", dry_run=dry_run)


@overload
def drain_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> Node: ...
@overload
def drain_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def drain_node(*, actor: Actor, node: Node, dry_run: bool) -> Node | DryRunResult: ...
def drain_node(*, actor: Actor, node: Node, dry_run: bool = False) -> Node | DryRunResult:
    """Cordon the node and evict every job on it, each after its grace period, to run elsewhere.

    The dry run's preview lists the jobs the next cycle evicts (rule `drain`). The node stays
    draining, and empty, until it is uncordoned.
    """
    return _change_schedulability(actor=actor, node=node, state=NodeState.DRAINING, verb="drain", dry_run=dry_run)


@overload
def uncordon_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> Node: ...
@overload
def uncordon_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def uncordon_node(*, actor: Actor, node: Node, dry_run: bool) -> Node | DryRunResult: ...
def uncordon_node(*, actor: Actor, node: Node, dry_run: bool = False) -> Node | DryRunResult:
    """A cordoned or draining node takes new placements again (ready)."""
    return _change_schedulability(actor=actor, node=node, state=NodeState.READY, verb="uncordon", dry_run=dry_run)


@overload
def delete_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> None: ...
@overload
def delete_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def delete_node(*, actor: Actor, node: Node, dry_run: bool) -> DryRunResult | None: ...
def delete_node(*, actor: Actor, node: Node, dry_run: bool = False) -> DryRunResult | None:
    """Refused while the roots' guarantees need its capacity, or while something placed on it holds it."""
    _require_platform_admin(actor, "change the inventory")

    def apply() -> None:
        with transaction.atomic():
            tree = _Tree.locked(node.pool_id)
            current = Node.objects.select_for_update().get(pk=node.pk)
            errors = _Errors()
            for reason in hooks.node_delete_blockers(current):
                errors.add("node", reason)
            capacity = _capacity_after(tree, node_snapshot(current), None)
            tree.check_capacity(capacity, errors, {}, f"Removing {current.name}")
            errors.raise_if_any()
            node_id = _delete_audited(actor=actor, row=current, field="node", before=node_snapshot(current))
            _on_commit_send(signals.inventory_changed, Node, action="node.delete", node_ids=[node_id])

    if dry_run:
        return _dry_run(apply, pool_id=node.pool_id)
    apply()
    return None


NODE_ENTRY_KEYS = frozenset({"name", "count", "gpus", "cpu", "memory_gib", "gpu_model", "labels", "state"})


def expand_node_entries(entries: object) -> list[dict[str, Any]]:
    """The `nodes:` list of a scenario or inventory file as one spec per node.

    `count: N` (N > 1) expands `name` into name-1 … name-N. Errors name the entry and the field.
    """
    if not isinstance(entries, list):
        raise ValidationError({"nodes": f"nodes must be a list of entries, got {type(entries).__name__}."})
    specs: list[dict[str, Any]] = []
    errors = _Errors()
    seen: dict[str, str] = {}
    for position, entry in enumerate(entries):
        where = f"nodes[{position}]"
        if not isinstance(entry, dict):
            errors.add(where, f"{where} must be a mapping like {{name: gpu, gpus: 8}}, got {entry!r}.")
            continue
        label = f"{where} ({entry.get('name', 'no name')})"
        unknown = sorted(set(entry) - NODE_ENTRY_KEYS)
        if unknown:
            errors.add(
                where,
                f"{label}: unknown field(s) {', '.join(map(str, unknown))}; "
                f"known: {', '.join(sorted(NODE_ENTRY_KEYS))}.",
            )
        for required in ("name", "gpus"):
            if required not in entry:
                errors.add(where, f"{label}: {required} is required.")
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            errors.add(where, f"{label}: count must be a whole number ≥ 1, got {count!r}.")
            continue
        if "name" not in entry or "gpus" not in entry or unknown:
            continue
        base = str(entry["name"])
        names = [base] if count == 1 else [f"{base}-{index}" for index in range(1, count + 1)]
        for node_name in names:
            if node_name in seen:
                errors.add(where, f"{label}: node {node_name} is already defined by {seen[node_name]}.")
                continue
            seen[node_name] = where
            spec = {key: value for key, value in entry.items() if key != "count"}
            if spec.get("state") == "down":
                # Inventory files written before the agent's states say `down` for not ready.
                spec["state"] = NodeState.NOT_READY
            spec["name"] = node_name
            spec["_entry"] = label
            specs.append(spec)
    errors.raise_if_any()
    return specs


def load_inventory(*, actor: Actor, nodes: object, pool: ResourcePool | None = None) -> InventoryResult:
    """Create or update the nodes of an inventory file, by name, all or nothing; other nodes stay."""
    _require_platform_admin(actor, "change the inventory")
    specs = expand_node_entries(nodes)
    result = InventoryResult(created=[], updated=[], unchanged=[])
    with transaction.atomic():
        for spec in specs:
            entry = spec.pop("_entry")
            existing = Node.objects.filter(name=spec["name"]).first()
            try:
                if existing is None:
                    create_node(actor=actor, pool=pool, **spec)
                    result["created"].append(spec["name"])
                    continue
                # Only the fields the file names are set; what it leaves out stays as it is.
                changes = {field: value for field, value in spec.items() if getattr(existing, field) != value}
                if not changes:
                    result["unchanged"].append(spec["name"])
                    continue
                update_node(actor=actor, node=existing, **changes)
                result["updated"].append(spec["name"])
            except ValidationError as error:
                raise ValidationError(
                    {
                        field: [f"{entry}: {message}" for message in messages]
                        for field, messages in error_messages(error).items()
                    }
                ) from None
    return result
