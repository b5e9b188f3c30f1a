"""Human-readable output of `manage.py simulate`: a checkpoint as two tables."""

from __future__ import annotations

from scheduling.simulate.scenario import (
    Checkpoint,
    show,
)


def format_checkpoint(checkpoint: Checkpoint) -> str:
    """One table of quotas and one of jobs, as a person reads them in a terminal."""
    lines = [f"== checkpoint {checkpoint.name} at t={show(float(checkpoint.time))}s =="]
    # A pool column only where there is more than one pool: a one-pool table reads as before.
    several_pools = len({f.get("pool") for f in checkpoint.quotas.values()}) > 1
    quota_rows = [
        [
            *([str(f["pool"])] if several_pools else []),
            name,
            *(show(float(f[key])) for key in ("guaranteed", "fair_share", "allocated", "allocated_self")),
            str(f["running"]),
            str(f["pending"]),
        ]
        for name, f in checkpoint.quotas.items()
    ]
    lines += _table(
        [
            *(["pool"] if several_pools else []),
            *("quota", "guaranteed", "fair_share", "allocated", "allocated_self", "running", "pending"),
        ],
        quota_rows,
    )
    resource_rows = [
        [name, resource, *(show(float(figures[key])) for key in ("guaranteed", "fair_share", "allocated")), limit]
        for name, f in checkpoint.quotas.items()
        for resource in ("cpu", "memory_gib")
        if (figures := f.get(resource)) is not None
        for limit in ["" if figures["limit"] is None else show(float(figures["limit"]))]
    ]
    if resource_rows:  # CPU and memory where the pool manages them (cores, GiB)
        lines.append("")
        lines += _table(["quota", "resource", "guaranteed", "fair_share", "allocated", "limit"], resource_rows)
    lines.append("")
    job_rows = []
    for name, f in checkpoint.jobs.items():
        reason = f["reason"]
        why = f"{reason['code']} (#{reason['position']}): {reason['message']}" if reason else ""
        job_rows.append(
            [
                name,
                f["state"],
                f["quota"],
                show(float(f["gpus"])),
                str(f["replicas"]),
                ",".join(f["nodes"]),
                str(f["preemptions"]),
                why,
            ]
        )
    lines += _table(["job", "state", "quota", "gpus", "replicas", "nodes", "preemptions", "reason"], job_rows)
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]

    def render(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    return [render(header), render(["-" * width for width in widths]), *(render(row) for row in rows)]
