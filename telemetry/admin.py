from __future__ import annotations

from django.contrib import admin

from telemetry.models import GpuSample
from utilities.admin import ReadOnlyAdmin


@admin.register(GpuSample)
class GpuSampleAdmin(ReadOnlyAdmin):
    """Written by the sampler and the node agent, averaged and pruned by beat (telemetry.services)."""

    list_display = ["at", "resolution", "node", "gpu", "job", "utilisation", "memory_used_mib", "memory_total_mib"]
    list_filter = ["resolution"]
    list_select_related = ["node", "job"]
    # Millions of rows: no total count on the list page.
    show_full_result_count = False
