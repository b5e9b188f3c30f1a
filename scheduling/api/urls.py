"""API routes of scheduling, mounted under /api/v1/ by console.urls."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduling.api.agent import AgentHeartbeatView, AgentRegisterView
from scheduling.api.views import JobViewSet, SchedulerCycleView, SchedulerStatusView

router = SimpleRouter(trailing_slash=True)
router.register("jobs", JobViewSet, basename="job")

urlpatterns = [
    path("agent/register/", AgentRegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", AgentHeartbeatView.as_view(), name="agent-heartbeat"),
    path("scheduler/cycle/", SchedulerCycleView.as_view(), name="scheduler-cycle"),
    path("scheduler/status/", SchedulerStatusView.as_view(), name="scheduler-status"),
    *router.urls,
]
