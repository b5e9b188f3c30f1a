"""Viewsets of workspaces, their members, custom roles and scheduling configuration; thin.

Every queryset goes through `workspaces.permissions.restrict`: a workspace the user may not
see is a 404; on one they see, a forbidden action is a 403 with the reason.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response

from quotas.api.permissions import IsPlatformAdmin
from workspaces import services
from workspaces.api.permissions import RestrictedViewSetMixin
from workspaces.api.serializers import (
    CustomRoleSerializer,
    MembershipSerializer,
    SchedulingConfigSerializer,
    WorkspaceSerializer,
)
from workspaces.models import CustomRole, Membership, Workspace
from workspaces.permissions import can, denial_reason, restrict


class WorkspaceViewSet(RestrictedViewSetMixin, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Platform admins create, rename, bind and delete; workspace admins edit the description."""

    queryset = Workspace.objects.prefetch_related("quotas").order_by("id")
    serializer_class = WorkspaceSerializer
    filterset_fields = ["name"]
    action_permissions = {"destroy": "administer"}

    def get_permissions(self) -> list[Any]:
        if self.action == "create":
            return [IsPlatformAdmin()]
        return super().get_permissions()

    def perform_create(self, serializer: Any) -> None:
        fields = serializer.validated_data
        serializer.instance = services.create_workspace(
            actor=self.request.user,
            name=fields["name"],
            description=fields.get("description", ""),
            quotas=fields.get("quotas", ()),
        )

    def perform_update(self, serializer: Any) -> None:
        fields = serializer.validated_data
        serializer.instance = services.update_workspace(
            actor=self.request.user,
            workspace=serializer.instance,
            name=fields.get("name"),
            description=fields.get("description"),
            quotas=fields.get("quotas"),
        )

    def perform_destroy(self, instance: Workspace) -> None:
        services.delete_workspace(actor=self.request.user, workspace=instance)

    @extend_schema(request=SchedulingConfigSerializer, responses=SchedulingConfigSerializer)
    @action(detail=True, methods=["get", "put"], url_path="scheduling-config")
    def scheduling_config(self, request: Request, pk: str | None = None) -> Response:
        """The Scheduling Configurations tab: members read it, workspace admins replace it whole."""
        workspace = self.get_object()
        if not can(request.user, "view_details", workspace):
            raise PermissionDenied(denial_reason(request.user, "view_details", workspace))
        if request.method == "PUT":
            serializer = SchedulingConfigSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            services.set_scheduling_config(
                actor=request.user, workspace=workspace, rules=serializer.validated_data["rules"]
            )
        return Response({"rules": services.scheduling_config(workspace)})


class WorkspaceScopedViewSet(RestrictedViewSetMixin, viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Rows that live inside one workspace (`workspaces/{workspace_pk}/…`): its members read,
    its admins write; the workspace itself decides 404 versus 403 before the body is read."""

    workspace: Workspace

    def check_permissions(self, request: Request) -> None:
        super().check_permissions(request)
        self.workspace = get_object_or_404(
            restrict(Workspace.objects.all(), request.user, "view"), pk=self.kwargs["workspace_pk"]
        )
        if not can(request.user, "view_details", self.workspace):
            raise PermissionDenied(denial_reason(request.user, "view_details", self.workspace))
        if request.method not in SAFE_METHODS and not can(request.user, "manage", self.workspace):
            raise PermissionDenied(denial_reason(request.user, "manage", self.workspace))


class MembershipViewSet(WorkspaceScopedViewSet):
    serializer_class = MembershipSerializer
    filterset_fields = ["role"]

    queryset = Membership.objects.none()  # for the schema; requests go through get_queryset

    def get_queryset(self) -> QuerySet[Membership]:
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        return restrict(
            Membership.objects.filter(workspace_id=self.kwargs["workspace_pk"]).select_related("user").order_by("id"),
            self.request.user,
            "view",
        )

    def perform_create(self, serializer: Any) -> None:
        fields = serializer.validated_data
        serializer.instance = services.add_member(
            actor=self.request.user, workspace=self.workspace, user=fields["user"], role=fields["role"]
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = services.change_member_role(
            actor=self.request.user,
            membership=serializer.instance,
            role=serializer.validated_data.get("role", serializer.instance.role),
        )

    def perform_destroy(self, instance: Membership) -> None:
        services.remove_member(actor=self.request.user, membership=instance)


class CustomRoleViewSet(WorkspaceScopedViewSet):
    serializer_class = CustomRoleSerializer
    filterset_fields = ["name"]

    queryset = CustomRole.objects.none()  # for the schema; requests go through get_queryset

    def get_queryset(self) -> QuerySet[CustomRole]:
        if getattr(self, "swagger_fake_view", False):
            return CustomRole.objects.none()
        return restrict(
            CustomRole.objects.filter(workspace_id=self.kwargs["workspace_pk"]).order_by("id"),
            self.request.user,
            "view",
        )

    def perform_create(self, serializer: Any) -> None:
        fields = serializer.validated_data
        serializer.instance = services.create_custom_role(
            actor=self.request.user, workspace=self.workspace, name=fields["name"], permissions=fields["permissions"]
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = services.update_custom_role(
            actor=self.request.user,
            role=serializer.instance,
            permissions=serializer.validated_data.get("permissions", serializer.instance.permissions),
        )

    def perform_destroy(self, instance: CustomRole) -> None:
        services.delete_custom_role(actor=self.request.user, role=instance)


def _scoped_routes(viewset: type[WorkspaceScopedViewSet]) -> tuple[Any, Any]:
    collection = viewset.as_view({"get": "list", "post": "create"})
    member = viewset.as_view({"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"})
    return collection, member


MEMBER_VIEWS = _scoped_routes(MembershipViewSet)
ROLE_VIEWS = _scoped_routes(CustomRoleViewSet)
