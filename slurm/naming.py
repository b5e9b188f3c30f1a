"""The names of the Slurm jobs the console submits, and whose they are.

A name is `gqc-CONSOLE-JOB-REPLICA`: CONSOLE is the installation's identity
(quotas.node_agents.installation_identity, a UUID made once and kept in the database), JOB and
REPLICA the console's job and placement ids. The ids alone are not enough to say a job is this
console's: a second console on the same cluster, or this console's database rebuilt, counts its
jobs and placements from 1 again. The identity goes in the name rather than in `--comment`
because the name is the key the console adopts a job by (a lost sbatch answer), is in every
answer squeue and sacct give, and is kept by Slurm's accounting without the `job_comment` flag.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from slurm.client import SlurmJob

logger = logging.getLogger("slurm.executor")

PREFIX = "gqc-"
# Any console's name, and the names from before names carried an identity (no CONSOLE part).
_NAME = re.compile(r"^gqc-(?:(?P<console>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-)?\d+-\d+$")
# The Slurm ids of other consoles' jobs already logged: those squeue still lists, no more.
_reported: set[int] = set()


def job_name(console: str, job_id: int, replica: int) -> str:
    return f"{PREFIX}{console}-{job_id}-{replica}"


@dataclass(frozen=True, slots=True)
class Sorted:
    """squeue's jobs named as a console names them: this console's, and the others'."""

    own: list[SlurmJob]
    foreign: list[SlurmJob]


def sort_out(jobs: Iterable[SlurmJob], console: str) -> Sorted:
    own: list[SlurmJob] = []
    foreign: list[SlurmJob] = []
    for job in jobs:
        named = _NAME.match(job.name)
        if named is None:
            continue  # not a console's job at all
        (own if named["console"] == console else foreign).append(job)
    return Sorted(own, foreign)


def report_foreign(foreign: Iterable[SlurmJob]) -> None:
    """Log each other console's job once: it is left alone, never adopted, signalled or cancelled."""
    seen: set[int] = set()
    for job in foreign:
        seen.add(job.slurm_id)
        if job.slurm_id in _reported:
            continue
        owner = _NAME.match(job.name)
        whose = f"console {owner['console']}'s" if owner and owner["console"] else "named without a console identity"
        logger.info(
            "Slurm job %s (%s, %s) is %s, not this console's: left alone", job.slurm_id, job.name, job.state, whose
        )
    _reported.clear()
    _reported.update(seen)


__all__ = ["PREFIX", "Sorted", "job_name", "report_foreign", "sort_out"]
