"""Scheduler events as topic changes for the live pages (issue 12): who hears what, and how small.

`events.publish` sends every event after commit; this turns one into the small JSON changes of
the topics it touches and sends each to its topic's Channels group:

- `job:<id>`: the job's state (and its label), why it waits, the GPUs it holds;
- `workspace:<id>`: `{"jobs": {"<id>": state}}` for the workspace's jobs that changed;
- `quota:<id>`: the quota's figures (guaranteed, fair share, allocated with its own jobs' part,
  running, pending), for
  the quotas of the jobs that changed and their ancestors (allocation rolls up the tree);
- `cluster`: after a cycle with decisions, its counts and the GPUs allocated in all (no job
  names: every signed-in user may hear `cluster`).

Changes are read from the database after commit, so a message says what is true now, whatever
order events arrive in. Consumers (live.consumers) coalesce them per topic and per socket.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from quotas import selectors as quota_selectors
from quotas.models import Quota
from scheduling import mentions, selectors

MESSAGE_TYPE: Final = "live.change"
TOPIC_KINDS: Final = ("cluster", "quota", "job", "node", "workspace")

logger = logging.getLogger(__name__)

TopicChange = tuple[str, dict[str, Any]]


def topic_group(topic: str) -> str:
    """The Channels group of a topic: `job:12` → `live.job.12` (group names allow no colon)."""
    return "live." + topic.replace(":", ".")


def topic_changes(batch: Sequence[Mapping[str, Any]]) -> list[TopicChange]:
    """The (topic, change) pairs of the scheduler events of one commit, read in a constant number
    of queries whatever the number of events."""
    changes, quota_ids = first_changes(batch)
    return changes + quota_changes(quota_ids)


def first_changes(batch: Sequence[Mapping[str, Any]]) -> tuple[list[TopicChange], set[int]]:
    """The jobs', workspaces' and cluster's changes of one commit (two queries), and the quotas
    they touch. Quota figures come apart (`quota_changes`): they need the whole tree's fair share,
    the costly read (a few hundred ms on S3), and the cheap changes need not wait for it."""
    job_ids = sorted({job_id for event in batch for job_id in _job_ids(event)})
    rows = selectors.live_job_rows(job_ids=job_ids) if job_ids else []
    # Who hears a job's topic need not see the jobs its reason names ("waits while 42, …"):
    # they are described by quota, workspace and GPUs, for every listener alike.
    reasons = mentions.reasons_for_everyone(
        {row["id"]: row["reason_message"] for row in rows if row["state"] == "pending" and row["reason_message"]}
    )
    changes: list[TopicChange] = []
    by_workspace: dict[int, dict[str, str]] = {}
    quota_ids: set[int] = set()
    for row in rows:
        changes.append(
            (
                f"job:{row['id']}",
                {
                    "state": row["state"],
                    "state_display": row["state_display"],
                    "reason_code": row["reason_code"] if row["state"] == "pending" else "",
                    "reason": reasons.get(row["id"], "") if row["state"] == "pending" else "",
                    "allocated_gpus": row["allocated_gpus"],
                },
            )
        )
        by_workspace.setdefault(row["workspace_id"], {})[str(row["id"])] = row["state"]
        quota_ids.add(row["quota_id"])
    changes.extend((f"workspace:{workspace_id}", {"jobs": jobs}) for workspace_id, jobs in by_workspace.items())
    cycles = [event for event in batch if event.get("kind") == "cycle"]
    if cycles:
        event = cycles[-1]
        # First of the commit's changes: every signed-in page may listen to `cluster`.
        changes.insert(
            0,
            (
                "cluster",
                {
                    "admitted": event.get("admitted", 0),
                    "evicted": event.get("evicted", 0),
                    "pending": event.get("pending", 0),
                    "cycle_ms": event.get("duration_ms"),
                    "cycle_at": event.get("started_at"),
                    "allocated_gpus": selectors.allocated_gpus_total(),
                },
            ),
        )
    return changes, quota_ids


def commit_stamp() -> float:
    """The envelope's `committed_at`: seconds since the epoch, to the millisecond. Taken when the
    publisher runs after commit, so a client can tell how stale a change is (and the fan-out
    benchmark measures commit to client with it)."""
    return round(time.time(), 3)


async def send_topic_changes(layer: Any, changes: Sequence[TopicChange], *, committed_at: float | None = None) -> None:
    """Send each change to its topic's group, all in the caller's one event loop, each stamped
    with the commit it comes from (`committed_at`, taken now when the caller has none)."""
    stamp = commit_stamp() if committed_at is None else committed_at
    sends = [
        (topic_group(topic), {"type": MESSAGE_TYPE, "topic": topic, "change": change, "committed_at": stamp})
        for topic, change in changes
    ]
    # The console's layer (console.channel_layer, settings' CHANNEL_LAYERS) checks every topic's
    # members in one round trip and sends only where someone listens, a few sends in flight;
    # each topic has one change per batch, and batches go one after the other, so a topic's
    # changes keep their order.
    await layer.group_send_many(sends)


def _job_ids(event: Mapping[str, Any]) -> list[int]:
    if event.get("kind") == "job" and event.get("id") is not None:
        return [int(event["id"])]
    if event.get("kind") == "cycle":
        decided = {decision.get("job_id") for decision in event.get("decisions", ()) if isinstance(decision, dict)}
        return sorted(int(job_id) for job_id in decided if job_id is not None)
    return []


def quota_changes(quota_ids: Collection[int]) -> list[TopicChange]:
    """The figures of the quotas touched and of their ancestors (allocation rolls up the tree)."""
    if not quota_ids:
        return []
    quotas = list(Quota.objects.only("id", "parent_id", "gpus", "name"))
    by_id = {quota.pk: quota for quota in quotas}
    touched: set[int] = set()
    for quota_id in quota_ids:
        current: int | None = quota_id
        while current is not None and current in by_id and current not in touched:
            touched.add(current)
            current = by_id[current].parent_id
    statuses = quota_selectors.quota_statuses([by_id[quota_id] for quota_id in sorted(touched)])
    return [
        (
            f"quota:{quota_id}",
            {
                "guaranteed": float(by_id[quota_id].gpus),
                "fair_share": round(status["fair_share"], 3),
                "allocated": round(status["allocated"], 3),
                "allocated_self": round(status["allocated_self"], 3),
                "running": status["running"],
                "pending": status["pending"],
                **_managed_resource_figures(status),
            },
        )
        for quota_id, status in statuses.items()
    ]


def _managed_resource_figures(status: Mapping[str, Any]) -> dict[str, float]:
    """CPU and memory of a quota whose pool manages them, flat (`cpu_allocated`,
    `memory_gib_fair_share`) as a page's live cells name one field each; none for a GPU-only pool.
    A guarantee or limit changes only with an edit, which reloads the page."""
    figures: dict[str, float] = {}
    for resource in ("cpu", "memory_gib"):
        managed = status.get(resource)
        if managed:
            figures[f"{resource}_allocated"] = round(managed["allocated"], 3)
            figures[f"{resource}_fair_share"] = round(managed["fair_share"], 3)
    return figures
