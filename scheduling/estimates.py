"""The Submit job page's live estimate in words: what the dry-run submit says the next cycle
would do with the job, as one sentence a person reads ("Starts now on gpu-3, GPUs 4–7").

The numbers come from the engine (its placements, its pending reason, the jobs it would evict);
this module only puts them in order. Reads go through selectors; nothing here writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from quotas import bounds
from scheduling.engine.types import EXCEEDS_CLUSTER

# "cannot_start": the engine says the job asks more than the cluster has (EXCEEDS_CLUSTER, a
# replica above every node or more GPUs than the pool): no cycle would ever admit it as asked.
Verdict = Literal["starts", "waits", "cannot_start", "refused", "incomplete"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """One verdict and its sentence; `field_name` names the form field a refusal belongs to."""

    verdict: Verdict
    sentence: str
    field_name: str = ""
    reclaims: list[str] = field(default_factory=list)


def device_ranges(devices: Sequence[int]) -> str:
    """[4, 5, 6, 7] → "GPUs 4–7"; [0, 2] → "GPUs 0, 2"; [3] → "GPU 3"."""
    ordered = sorted(devices)
    if len(ordered) == 1:
        return f"GPU {ordered[0]}"
    runs: list[list[int]] = []
    for device in ordered:
        if runs and device == runs[-1][-1] + 1:
            runs[-1].append(device)
        else:
            runs.append([device])
    parts = [f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return "GPUs " + ", ".join(parts)


def placement_words(placements: Iterable[dict[str, Any]]) -> str:
    """Each node once, with the devices every replica there takes; a share of a GPU says how much."""
    by_node: dict[str, list[int]] = defaultdict(list)
    shares: list[str] = []
    for placement in placements:
        fraction = float(placement.get("fraction", 1.0))
        if fraction < 1:
            shares.append(f"{placement['node']}, {bounds.readable(fraction)} of {device_ranges(placement['devices'])}")
        else:
            by_node[placement["node"]].extend(placement["devices"])
    whole = [f"{node}, {device_ranges(devices)}" for node, devices in by_node.items()]
    return "; ".join(whole + shares)


def _reclaim_words(evict: list[dict[str, Any]]) -> list[str]:
    """The jobs the engine would evict for this one, by quota: "8 GPUs from Quota1.2 (train-c)".
    A job the reader may not see is only its workspace's (the preview left its name out)."""
    gpus_by_quota: dict[str, float] = defaultdict(float)
    jobs_by_quota: dict[str, list[str]] = defaultdict(list)
    for entry in evict:
        gpus_by_quota[entry["quota"]] += entry["gpus"]
        rule = f", {entry['rule']} rule" if entry.get("rule") else ""
        named = entry["job"] if entry.get("visible") else f"a job of {entry['workspace']}"
        jobs_by_quota[entry["quota"]].append(f"{named}{rule}")
    return [
        f"{bounds.readable(gpus)} GPUs from {quota} ({'; '.join(jobs_by_quota[quota])})"
        for quota, gpus in gpus_by_quota.items()
    ]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def from_preview(preview: Any) -> Estimate:
    """A SubmitPreview (scheduling.services) in words."""
    reclaims = _reclaim_words(preview.evict)
    reclaiming = f"; would reclaim {', '.join(reclaims)}" if reclaims else ""
    if preview.would_admit:
        return Estimate(
            "starts", f"Starts now on {placement_words(preview.placements)}{reclaiming}.", reclaims=reclaims
        )
    reason = preview.reason or {}
    message = reason.get("message") or "the next cycle would not admit it yet"
    position = f" (#{reason['position']} in the queue, {reason['code']})" if reason.get("position") else ""
    if reason.get("code") == EXCEEDS_CLUSTER:
        where = position or f" ({EXCEEDS_CLUSTER})"
        return Estimate("cannot_start", f"Cannot start: {message}{where}.".replace("..", "."))
    return Estimate("waits", f"Waits: {message}{reclaiming}{position}.".replace("..", "."), reclaims=reclaims)


def refused(message: str, field_name: str = "") -> Estimate:
    """The service's own refusal, word for word (the same sentence a real submit shows)."""
    return Estimate("refused", f"Refused: {message.rstrip('.')}.", field_name=field_name)
