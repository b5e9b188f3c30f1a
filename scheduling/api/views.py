"""Jobs and scheduler endpoints: thin, shapes only; every rule lives in scheduling.services."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiExample, PolymorphicProxySerializer, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from quotas.api.permissions import IsPlatformAdmin
from quotas.api.serializers import DryRunResultSerializer
from quotas.models import Quota
from scheduling import agent_selectors, mentions, selectors, services, triggers
from scheduling.api.filters import JobFilter
from scheduling.api.serializers import (
    CycleOutcomeSerializer,
    JobDryRunSerializer,
    JobEventSerializer,
    JobLogSerializer,
    JobSerializer,
    JobSubmitSerializer,
    SchedulerStatusSerializer,
    SubmitPreviewSerializer,
)
from scheduling.executors import get_executor
from scheduling.models import Job
from workspaces.api.permissions import RestrictedViewSetMixin
from workspaces.models import Workspace
from workspaces.permissions import restrict


class JobViewSet(
    RestrictedViewSetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,  # type: ignore[type-arg]
):
    """Members see their workspaces' jobs; owners, operators and admins cancel them."""

    queryset = Job.objects.all()
    serializer_class = JobSerializer
    filterset_class = JobFilter
    action_permissions = {"cancel": "manage", "events": "view", "logs": "view"}

    def get_queryset(self) -> QuerySet[Job]:
        return selectors.job_list(queryset=super().get_queryset()).order_by("-submitted_at", "-id")

    @extend_schema(
        request=JobSubmitSerializer,
        responses={201: JobSerializer, 200: SubmitPreviewSerializer},
        # Swagger UI pre-fills "Try it out" with the first example; without one it made a body
        # from the types alone (priority 0, min_replicas 0) that the API refuses. The names are
        # the demo's, so the example works as it stands on a console started with bin/run.
        examples=[
            OpenApiExample(
                "Estimate a training job",
                summary="dry run: would it start now?",
                request_only=True,
                value={
                    "name": "train-demo",
                    "workspace": "workspace-b",
                    "quota": "Quota1.1",
                    "kind": "training",
                    "gpus": 8,
                    "replicas": 2,
                    "priority": 3,
                    "preemptible": True,
                    "command": "python train.py",
                    "dry_run": True,
                },
            ),
            OpenApiExample(
                "Submit a notebook",
                summary="one GPU, interactive",
                request_only=True,
                value={
                    "name": "notebook-demo",
                    "workspace": "workspace-b",
                    "quota": "Quota1.1",
                    "kind": "notebook",
                    "gpus": 1,
                },
            ),
        ],
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Submit a job; with `dry_run: true` say whether the next cycle would admit it (200), else 201."""
        submitted = JobSubmitSerializer(data=request.data)
        submitted.is_valid(raise_exception=True)
        fields = dict(submitted.validated_data)
        workspace_name = fields.pop("workspace")
        quota_name = fields.pop("quota")
        workspace = restrict(Workspace.objects.filter(name=workspace_name), request.user, "submit").first()
        if workspace is None:
            raise ValidationError({"workspace": f"no workspace named {workspace_name!r} that you may submit to"})
        quota = restrict(Quota.objects.filter(name=quota_name), request.user, "view").first()
        if quota is None:
            raise ValidationError({"quota": f"no quota named {quota_name!r} that you may use"})
        if fields.pop("dry_run"):
            preview = services.preview_submit_job(actor=request.user, workspace=workspace, quota=quota, **fields)
            return Response(preview.as_dict(), status=status.HTTP_200_OK)
        submitted_job = services.submit_job(actor=request.user, workspace=workspace, quota=quota, **fields)
        job = selectors.job_list().get(pk=submitted_job.pk)
        return Response(JobSerializer(job, context={"request": request}).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=JobDryRunSerializer,
        responses={
            200: PolymorphicProxySerializer(
                component_name="JobOrDryRun",
                serializers=[JobSerializer, DryRunResultSerializer],
                resource_type_field_name=None,
            )
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        options = JobDryRunSerializer(data=request.data)
        options.is_valid(raise_exception=True)
        if options.validated_data["dry_run"]:
            return Response(services.preview_cancel_job(actor=request.user, job=job).as_dict())
        cancelled = services.cancel_job(actor=request.user, job=job)
        cancelled_job = selectors.job_list().get(pk=cancelled.pk)
        return Response(JobSerializer(cancelled_job, context={"request": request}).data)

    @extend_schema(responses={200: JobEventSerializer(many=True)})
    # A job's whole history, unpaginated; the list's filters (state, kind…) are not the events'.
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The job's history; a job it made room for that you may not see is its quota, workspace and GPUs."""
        job = self.get_object()
        return Response(JobEventSerializer(mentions.job_history(request.user, job), many=True).data)

    @extend_schema(responses={200: JobLogSerializer})
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """The last lines of the job's output, as its node agents shipped them (AGENT.md)."""
        lines, truncated = agent_selectors.job_log(job=self.get_object())
        return Response({"lines": lines, "truncated": truncated})


class SchedulerCycleView(APIView):
    """Run one cycle now (platform admins) and return its decisions."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(request=None, responses={200: CycleOutcomeSerializer})
    def post(self, request: Request) -> Response:
        """Ran (its decisions), or busy (`refused: lock_busy`, `queued: true`): within a second."""
        return Response(services.run_cycle_now(trigger=f"api:{request.user.get_username()}").as_dict())


class SchedulerStatusView(APIView):
    """The last cycle, who holds the lock now; decisions name jobs, so only platform admins see them."""

    @extend_schema(responses={200: SchedulerStatusSerializer})
    def get(self, request: Request) -> Response:
        status_now = selectors.scheduler_status(
            include_decisions=bool(request.user.is_superuser),
            executor=get_executor().name,
            trigger_mode=triggers.trigger_mode(),
        )
        return Response(status_now)
