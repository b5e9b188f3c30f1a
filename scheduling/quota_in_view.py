"""The Resource Quotas Overview's quota in view (issue 28): whose children the stacked area
stacks, and how a person moves between them without JavaScript: the picker's choices, the trail
up the tree, the box the treemap opens at. The figures themselves are quota_charts'.

PAI's story (Quota1.1 borrowing from an idle Quota1.2, then giving it back) is a story of one
parent's children: a chart of the roots only would show one band under a single root.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict
from urllib.parse import quote

from django.http import Http404

from quotas.models import Quota
from quotas.selectors import QuotaTreeRow


class QuotaChoice(TypedDict):
    """A quota the stacked area may stack the children of (the Overview's quota picker)."""

    quota_id: int
    label: str  # the name, indented by its depth (em spaces: an option holds no markup)


class InView(TypedDict):
    """Where the Overview stands in the tree, for its template (scheduling/quotas/allocation.html)."""

    quota: Quota | None  # whose children the stacked area stacks; None: the roots
    trail: list[Quota]  # the visible quotas from the top down to it, for the breadcrumb
    choices: list[QuotaChoice]  # the picker: every visible quota with visible children
    several_roots: bool  # "All quotas" (the roots stacked) is a choice of its own
    treemap_level: str  # the treemap's box for it ("" for the top); charts.js keeps it in step
    range_base: str  # the range switch's links keep the quota in view
    pool: str  # the pool the page shows alone ("" for all): the picker's hidden field keeps it
    pool_query: str  # "&pool=NAME" (or ""): every link of the section keeps the pool


def asked_quota(asked: str, rows: Sequence[QuotaTreeRow]) -> int | None:
    """The Overview's `?quota=`: a quota the user sees, else a 404, as its own page would be (a
    quota one may not see and one that does not exist answer alike); empty or absent, the roots."""
    asked = asked.strip()
    if not asked:
        return None
    if not asked.isdigit() or int(asked) not in {row["quota"].pk for row in rows}:
        raise Http404("No such quota.")
    return int(asked)


def focus_of(rows: Sequence[QuotaTreeRow], asked: int | None) -> Quota | None:
    """The quota in view: the one asked for, or with none asked a single root (one band of the
    whole tree would show nothing), else None (the roots)."""
    found = next((row["quota"] for row in rows if row["quota"].pk == asked), None)
    if found is not None:
        return found
    roots = [row["quota"] for row in rows if row["depth"] == 0]
    return roots[0] if asked is None and len(roots) == 1 else None


def parents_with_children(rows: Sequence[QuotaTreeRow]) -> set[int]:
    visible = {row["quota"].pk for row in rows}
    return {row["quota"].parent_id for row in rows if row["quota"].parent_id in visible}


def in_view(rows: Sequence[QuotaTreeRow], focus: Quota | None, *, asked: int | None, pool: str = "") -> InView:
    """The trail, the picker's choices and the treemap's level for the quota in view; `rows` are
    the chosen pool's alone where the page shows one (`pool`), whose links then keep it."""
    parents = parents_with_children(rows)
    pool_query = f"&pool={quote(pool, safe='')}" if pool else ""
    by_id = {row["quota"].pk: row["quota"] for row in rows}
    trail: list[Quota] = []
    current = focus
    while current is not None:
        trail.append(current)
        current = by_id.get(current.parent_id) if current.parent_id is not None else None
    return InView(
        quota=focus,
        trail=trail[::-1],
        # A leaf has nothing to stack: the picker offers the quotas with children, in tree order.
        choices=[
            QuotaChoice(quota_id=row["quota"].pk, label="\u2003" * min(row["depth"], 8) + row["quota"].name)
            for row in rows
            if row["quota"].pk in parents
        ],
        several_roots=sum(1 for row in rows if row["depth"] == 0) > 1,
        treemap_level=treemap_level(focus, parents) or "",
        range_base=f"?view=overview{pool_query}{'' if asked is None else f'&quota={asked}'}&range=",
        pool=pool,
        pool_query=pool_query,
    )


def treemap_level(focus: Quota | None, parents: set[int]) -> str | None:
    """The box the treemap opens at: the quota in view, or its parent when it has no children."""
    if focus is None:
        return None
    if focus.pk in parents:
        return str(focus.pk)
    return str(focus.parent_id) if focus.parent_id in parents else None
