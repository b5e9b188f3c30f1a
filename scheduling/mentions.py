"""How one job is named to a person reading about another: by its name where that person may see
it, else by its quota, workspace and GPUs ("8 GPUs of Quota1.1 (workspace-b)").

A dry run's victims, a cancel preview's admissions and a job's history (the job an eviction made
room for) all name other jobs, and those may belong to a workspace the reader cannot open: the
name and id of a foreign job would tell one team what another runs. `visible_job_pks` is the one
answer to "may this reader see that job", and it is `restrict()`'s (workspaces.permissions), so
a job named here by name is exactly a job whose page the reader may open. Everything else here
only words the answer.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from quotas.bounds import readable
from scheduling.models import HOLDING_STATES, Job
from scheduling.selectors import job_events
from workspaces.permissions import restrict

# None is the scheduler itself (the scenario runner's actor): it may name every job.
Reader = AbstractBaseUser | AnonymousUser | None

# Where the engine's and the commit's sentences name a job by its id or name: "preempted in Q by
# 42", "reclaimed for 42 of Q", "child-level preemption: Q's own job 42", "same-level
# preemption: 42 of Q ... over 17 of Q", "moved so that 42 can start", "to make room for
# train-b", "waits while 42, which it was evicted for, starts", "waits behind 42". Numbers
# elsewhere in those sentences (priorities, GPUs) never follow these words.
_NAMED_AFTER = r"(?:\bby |\bfor |\bjob |\bthat |\bpreemption: |\bover |\bwhile |\bbehind )"
# "waiting for 2 evicted job(s)" counts jobs: 2 is no job's id there.
_NAME_ENDS = r"(?=$|[\s,;:.)])(?! evicted job)"
# "waiting for 2 evicted job(s) (41, 42) to release their GPUs": the engine lists victims by id.
_VICTIM_LIST = re.compile(r"(evicted job\(s\) \()([^()]*)(\))")
_NAMED_ID = re.compile(rf"{_NAMED_AFTER}(\d+){_NAME_ENDS}")


@dataclass(frozen=True, slots=True)
class JobMention:
    """One job as a given reader may learn of it; `gpus` is what the mention is about (the GPUs a
    victim gives up, the GPUs a beneficiary asks for)."""

    pk: int
    name: str
    quota: str
    workspace: str
    gpus: float
    visible: bool

    @property
    def description(self) -> str:
        """The job without its name, which every reader of the sentence may learn."""
        return f"{readable(self.gpus)} GPU{'' if self.gpus == 1 else 's'} of {self.quota} ({self.workspace})"

    @property
    def label(self) -> str:
        """What a page shows where it names the job: its name, or its description."""
        return self.name if self.visible else self.description

    def as_api(self) -> dict[str, Any]:
        """The API's shape (docs/api.md): `job` and `id` are null where the reader may not see the
        job, so a client still counts the jobs and their GPUs, by quota and workspace."""
        return {
            "job": self.name if self.visible else None,
            "id": self.pk if self.visible else None,
            "quota": self.quota,
            "workspace": self.workspace,
            "gpus": self.gpus,
            "visible": self.visible,
            "description": self.description,
        }


def visible_job_pks(reader: Reader, pks: Collection[int]) -> set[int]:
    """Which of these jobs `reader` may see: `restrict()` over them, in one query."""
    wanted = set(pks)
    if not wanted:
        return set()
    if reader is None or getattr(reader, "is_superuser", False):
        return wanted
    return set(restrict(Job.objects.filter(pk__in=wanted), reader, "view").values_list("pk", flat=True))


def mention_jobs(
    reader: Reader, pks: Iterable[int], *, gpus: Mapping[int, float] | None = None
) -> dict[int, JobMention]:
    """Each job as `reader` may learn of it, in two queries. Its GPUs are `gpus[pk]` where given,
    else what it holds while it holds GPUs, else what it asks (GPUs per replica × replicas)."""
    wanted = set(pks)
    if not wanted:
        return {}
    visible = visible_job_pks(reader, wanted)
    rows = Job.objects.filter(pk__in=wanted).values_list(
        "pk", "name", "quota__name", "workspace__name", "state", "allocated_gpus", "gpus", "replicas"
    )
    given = gpus or {}
    mentions: dict[int, JobMention] = {}
    for pk, name, quota, workspace, state, allocated, per_replica, replicas in rows:
        amount = given.get(pk, allocated if state in HOLDING_STATES and allocated else per_replica * replicas)
        mentions[pk] = JobMention(
            pk=pk, name=name, quota=quota, workspace=workspace, gpus=float(amount), visible=pk in visible
        )
    return mentions


def unnamed(text: str, hidden: Iterable[JobMention]) -> str:
    """`text` with each hidden job's id and name, where a sentence of the scheduler names a job,
    replaced by its description. One pass: a description ("8 GPUs of …") may hold a number that
    is another hidden job's id, and is never read again."""
    said: dict[str, str] = {}
    for mention in hidden:
        if not mention.visible:
            said.update({token: mention.description for token in (str(mention.pk), mention.name) if token})
    if not said:
        return text
    tokens = "|".join(re.escape(token) for token in sorted(said, key=len, reverse=True))
    named = re.compile(rf"({_NAMED_AFTER})({tokens}){_NAME_ENDS}")

    def described(found: re.Match[str]) -> str:
        before, description = found.group(1), said[found.group(2)]
        # "own job 42" reads "own job (8 GPUs of Quota1 (workspace-c))".
        return before + (f"({description})" if before == "job " else description)

    def listed(found: re.Match[str]) -> str:
        victims = ", ".join(said.get(victim, victim) for victim in found.group(2).split(", "))
        return found.group(1) + victims + found.group(3)

    # Both in one pass over the original words: the victim list's parentheses are matched
    # before a description adds its own.
    either = re.compile(rf"{_VICTIM_LIST.pattern}|{named.pattern}")

    def replaced(found: re.Match[str]) -> str:
        if found.group(1) is not None:
            return listed(_VICTIM_LIST.fullmatch(found.group(0)) or found)
        return described(named.fullmatch(found.group(0)) or found)

    return either.sub(replaced, text)


def named_pks(text: str) -> set[int]:
    """The ids a scheduler sentence names jobs by (the places `unnamed` replaces)."""
    pks = {int(number) for number in _NAMED_ID.findall(text)}
    for victims in _VICTIM_LIST.findall(text):
        pks |= {int(victim) for victim in victims[1].split(", ") if victim.isdecimal()}
    return pks


def reasons_as_seen(reader: Reader, jobs: Iterable[Job]) -> dict[int, str]:
    """Each pending job's reason as `reader` may read it: the jobs it waits for or behind ("waits
    while 42, which it was evicted for, starts") by id where the reader may open them, else by
    quota, workspace and GPUs. Two queries for all the jobs, none where no reason names a job."""
    return reasons_read_by(reader, {job.pk: job.shown_message for job in jobs if job.shown_message})


def reasons_for_everyone(reasons: Mapping[int, str]) -> dict[int, str]:
    """Reasons (by job id) as a reader who may open no other job reads them: for a live topic,
    whose listeners need not all see the jobs a reason names."""
    return reasons_read_by(AnonymousUser(), reasons)


def reasons_read_by(reader: Reader, reasons: Mapping[int, str]) -> dict[int, str]:
    """`reasons_as_seen` for reasons by job id."""
    named = {pk: named_pks(reason) for pk, reason in reasons.items()}
    mentions = mention_jobs(reader, set().union(*named.values()) if named else set())
    return {
        pk: unnamed(reason, [mentions[other] for other in named[pk] if other in mentions])
        for pk, reason in reasons.items()
    }


def preview_as_seen(reader: Reader, preview: Mapping[str, Any]) -> dict[str, Any]:
    """A scheduler preview (scheduling.providers.preview: `admit` and `evict` entries) as `reader`
    may read it: each job, and the job an eviction makes room for (`beneficiary`, with
    `beneficiary_job` beside it), in the shape of `JobMention.as_api`; the engine's reasons
    name no hidden job. Platform admins, who alone preview quota and node changes, read it all."""
    admit = list(preview.get("admit", ()))
    evict = list(preview.get("evict", ()))
    pks = {int(entry["id"]) for entry in admit + evict if entry.get("id") is not None}
    pks |= {int(entry["beneficiary_id"]) for entry in evict if entry.get("beneficiary_id") is not None}
    given = {int(entry["id"]): float(entry["gpus"]) for entry in admit if entry.get("gpus") is not None}
    mentions = mention_jobs(reader, pks, gpus=given)
    hidden = [mention for mention in mentions.values() if not mention.visible]

    def seen(entry: Mapping[str, Any]) -> dict[str, Any]:
        mention = mentions.get(int(entry["id"]))
        shown = {**entry, **(mention.as_api() if mention is not None else {})}
        if entry.get("reason"):
            shown["reason"] = unnamed(str(entry["reason"]), hidden)
        if "beneficiary_id" in entry:
            beneficiary = mentions.get(int(entry["beneficiary_id"])) if entry["beneficiary_id"] is not None else None
            shown.pop("beneficiary_id")
            shown["beneficiary"] = beneficiary.name if beneficiary is not None and beneficiary.visible else None
            shown["beneficiary_job"] = beneficiary.as_api() if beneficiary is not None else None
        return shown

    return {**preview, "admit": [seen(entry) for entry in admit], "evict": [seen(entry) for entry in evict]}


@dataclass(frozen=True, slots=True)
class EventSeen:
    """One event of a job's history as a reader may read it (the job page, the API, the CLI)."""

    at: datetime
    kind: str
    kind_display: str
    rule: str
    beneficiary: JobMention | None
    message: str

    @property
    def beneficiary_name(self) -> str | None:
        return self.beneficiary.name if self.beneficiary is not None and self.beneficiary.visible else None

    @property
    def beneficiary_job(self) -> dict[str, Any] | None:
        return self.beneficiary.as_api() if self.beneficiary is not None else None


def job_history(reader: Reader, job: Job) -> list[EventSeen]:
    """The job's events, oldest first, each naming the job it made room for as `reader` may learn
    of it: a job of a workspace the reader cannot open is its quota, workspace and GPUs, in the
    beneficiary column and in the scheduler's sentence alike. Three queries, however long."""
    events = list(job_events(job=job))
    mentions = mention_jobs(reader, {event.beneficiary_id for event in events if event.beneficiary_id is not None})
    hidden = [mention for mention in mentions.values() if not mention.visible]
    return [
        EventSeen(
            at=event.at,
            kind=event.kind,
            kind_display=str(event.get_kind_display()),
            rule=event.rule,
            beneficiary=mentions.get(event.beneficiary_id) if event.beneficiary_id is not None else None,
            message=unnamed(event.message, hidden),
        )
        for event in events
    ]


def show_reasons_to(reader: Reader, jobs: Iterable[Job]) -> None:
    """For a page about to show these jobs: each one's reason, on the instance in hand, as
    `reader` may read it (`reasons_as_seen`). The row keeps the scheduler's words; a page never
    saves the jobs it shows."""
    shown = {job.pk: job for job in jobs}
    for pk, reason in reasons_as_seen(reader, shown.values()).items():
        shown[pk].shown_message = reason
