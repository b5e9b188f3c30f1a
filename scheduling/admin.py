"""Jobs and what the scheduler recorded, in Django's admin: read-only, with Cancel as an action.

A job's state, placements and events are the scheduler's: scheduling/services.py changes them
under the cycle lock, bumps the job's revision and publishes the change, so a direct row write
would be overwritten or, worse, disagree with the GPUs held (utilities.admin.ReadOnlyAdmin).
Cancelling goes through services.cancel_job, as the job page does.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduling import services
from scheduling.models import (
    AgentProcess,
    AllocationSample,
    CycleRecord,
    Job,
    JobEvent,
    JobLog,
    PendingReason,
    ReplicaPlacementRecord,
    ResourceFairShare,
    SchedulerFence,
    SchedulingChange,
)
from utilities.admin import ReadOnlyAdmin, ReadOnlyInline


class PlacementInline(ReadOnlyInline):
    model = ReplicaPlacementRecord
    fields = ["node", "devices", "fraction"]
    readonly_fields = ["node", "devices", "fraction"]


class EventInline(ReadOnlyInline):
    model = JobEvent
    fk_name = "job"
    fields = ["at", "kind", "rule", "beneficiary", "message"]
    readonly_fields = ["at", "kind", "rule", "beneficiary", "message"]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = [
        "name", "workspace", "quota", "owner", "kind", "state", "priority", "preemptible",
        "gpus", "replicas", "allocated_gpus", "submitted_at",
    ]  # fmt: skip
    list_select_related = ["workspace", "quota", "owner"]
    list_filter = ["state", "kind", "preemptible", "priority", "quota", "workspace"]
    search_fields = ["name", "owner__username", "workspace__name", "quota__name", "reason_code", "pending_reason__code"]
    date_hierarchy = "submitted_at"
    inlines = [PlacementInline, EventInline]
    actions = ["cancel"]

    @admin.action(description="Cancel selected jobs")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        cancelled = 0
        for job in queryset:
            if services.is_final(job):
                continue
            try:
                services.cancel_job(actor=request.user, job=job)
            except (PermissionDenied, ValidationError) as refused:
                self.message_user(request, f"{job.name}: {refused}", messages.ERROR)
            else:
                cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} job(s).", messages.SUCCESS)


@admin.register(ReplicaPlacementRecord)
class PlacementAdmin(ReadOnlyAdmin):
    list_display = ["job", "node", "devices", "fraction"]
    list_select_related = ["job", "node"]
    list_filter = ["node"]
    search_fields = ["job__name", "node__name"]


@admin.register(PendingReason)
class PendingReasonAdmin(ReadOnlyAdmin):
    """The engine's last word on a waiting job; it counts only at its job's revision (scheduling.pending_reasons)."""

    list_display = ["job", "revision", "code", "position", "message"]
    list_select_related = ["job"]
    list_filter = ["code"]
    search_fields = ["job__name", "code"]


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "job", "kind", "rule", "beneficiary", "message"]
    list_select_related = ["job", "beneficiary"]
    list_filter = ["kind", "rule"]
    search_fields = ["job__name", "message"]
    date_hierarchy = "at"


@admin.register(CycleRecord)
class CycleRecordAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "trigger", "duration_ms", "admitted", "evicted", "pending", "lock_holder"]
    list_filter = ["trigger"]
    date_hierarchy = "started_at"


@admin.register(SchedulerFence)
class SchedulerFenceAdmin(ReadOnlyAdmin):
    list_display = ["pk", "__str__"]


@admin.register(SchedulingChange)
class SchedulingChangeAdmin(ReadOnlyAdmin):
    """Writes not yet seen by a committed cycle: rows left here mean the next beat runs one."""

    list_display = ["pk", "reason"]


@admin.register(ResourceFairShare)
class ResourceFairShareAdmin(ReadOnlyAdmin):
    list_display = ["quota", "shares", "at"]


@admin.register(AllocationSample)
class AllocationSampleAdmin(ReadOnlyAdmin):
    """The cycle writes these and prunes them (scheduling.history); the charts read them."""

    list_display = ["at", "quota", "allocated", "guaranteed", "fair_share"]
    list_select_related = ["quota"]
    search_fields = ["quota__name"]
    date_hierarchy = "at"


@admin.register(AgentProcess)
class AgentProcessAdmin(ReadOnlyAdmin):
    """What the node agents report of the processes they run (scheduling.agent_services)."""

    list_display = ["job", "node", "replica", "state", "pid", "exit_code", "started_at", "exited_at"]
    list_select_related = ["job", "node"]
    list_filter = ["state"]
    search_fields = ["job__name", "node__name"]


@admin.register(JobLog)
class JobLogAdmin(ReadOnlyAdmin):
    """The tail of a job's log as its agent shipped it."""

    list_display = ["job", "truncated", "updated_at"]
    list_select_related = ["job"]
    search_fields = ["job__name"]
