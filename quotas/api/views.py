"""Viewsets of nodes, quotas (with scale and transfer) and the audit log: shape in, service call, shape out."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer, Serializer

from quotas import node_agents, selectors, services
from quotas.api.filters import AuditRecordFilter, NodeFilter, PoolFilter, QuotaFilter
from quotas.api.permissions import IsPlatformAdmin, PlatformAdminWritesOthersRead, PlatformAdminWritesVisibleReads
from quotas.api.serializers import (
    AuditRecordSerializer,
    DryRunFlagSerializer,
    DryRunResultSerializer,
    NodeSerializer,
    NodeTokenSerializer,
    PoolSerializer,
    QuotaSerializer,
    ScaleSerializer,
    TransferResultSerializer,
    TransferSerializer,
)
from quotas.models import AuditRecord, Node, NodeState, Quota, ResourcePool

# A query string carries text: the schema names the two words `?dry_run=` takes.
DRY_RUN_PARAMETER = OpenApiParameter(
    "dry_run",
    {"type": "string", "enum": ["true", "false"]},
    description="Validate and preview only; nothing changes. Also accepted in the body.",
)
QUERY_BOOLEANS = {"true": True, "false": False}


def _dry_run(request: Request, validated: dict[str, Any]) -> bool:
    """`dry_run` from the body, or from the query string (the only place a DELETE can carry it)."""
    from_body = bool(validated.pop("dry_run", False))
    return _query_dry_run(request) or from_body


def _query_dry_run(request: Request) -> bool:
    """`?dry_run=` is true or false; anything else (`null`, `maybe`) is a 400, not a real write."""
    written = request.query_params.get("dry_run")
    if written is None:
        return False
    if written not in QUERY_BOOLEANS:
        raise ValidationError({"dry_run": [f"dry_run must be true or false, got {written[:40]!r}."]})
    return QUERY_BOOLEANS[written]


def _or_dry_run(serializer: type[Serializer[Any]], name: str) -> PolymorphicProxySerializer:
    """The answer of a write that takes `dry_run`: the object, or `{valid, errors, preview}`."""
    return PolymorphicProxySerializer(
        component_name=name, serializers=[serializer, DryRunResultSerializer], resource_type_field_name=None
    )


# The node's state actions (down, up, cordon, drain, uncordon) take and answer the same shapes.
NODE_ACTION_SCHEMA = extend_schema(
    request=DryRunFlagSerializer,
    parameters=[DRY_RUN_PARAMETER],
    responses={200: _or_dry_run(NodeSerializer, "NodeOrDryRun")},
)


class PoolViewSet(viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Resource pools. Platform admins write; everyone signed in reads the pools of the quotas they may see."""

    serializer_class = PoolSerializer
    permission_classes = [PlatformAdminWritesVisibleReads]
    filterset_class = PoolFilter

    def get_queryset(self) -> QuerySet[ResourcePool]:
        return selectors.visible_pools(self.request.user)

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        serializer.instance = services.create_pool(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        assert serializer.instance is not None
        serializer.instance = services.update_pool(
            actor=self.request.user, pool=serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance: ResourcePool) -> None:
        services.delete_pool(actor=self.request.user, pool=instance)


@extend_schema_view(
    partial_update=extend_schema(
        parameters=[DRY_RUN_PARAMETER], responses={200: _or_dry_run(QuotaSerializer, "QuotaOrDryRun")}
    )
)
class QuotaViewSet(viewsets.ModelViewSet):  # type: ignore[type-arg]
    """The quota tree. Platform admins write; signed-in users read what they may see."""

    serializer_class = QuotaSerializer
    permission_classes = [PlatformAdminWritesVisibleReads]
    filterset_class = QuotaFilter

    def get_queryset(self) -> QuerySet[Quota]:
        return selectors.quota_list(user=self.request.user)

    def _represent(self, quota: Quota, *, status_code: int = status.HTTP_200_OK) -> Response:
        return Response(QuotaSerializer(quota, context=self.get_serializer_context()).data, status=status_code)

    @extend_schema(parameters=[DRY_RUN_PARAMETER], responses={201: QuotaSerializer, 200: DryRunResultSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        if _dry_run(request, fields):
            return Response(services.preview_create_quota(actor=request.user, **fields))
        quota = services.create_quota(actor=request.user, **fields)
        return self._represent(quota, status_code=status.HTTP_201_CREATED)

    @extend_schema(parameters=[DRY_RUN_PARAMETER], responses={200: _or_dry_run(QuotaSerializer, "QuotaOrDryRun")})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        serializer = self.get_serializer(quota, data=request.data, partial=kwargs.get("partial", False))
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        if _dry_run(request, changes):
            return Response(services.preview_update_quota(actor=request.user, quota=quota, **changes))
        return self._represent(services.update_quota(actor=request.user, quota=quota, **changes))

    @extend_schema(parameters=[DRY_RUN_PARAMETER], responses={204: None, 200: DryRunResultSerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        if _query_dry_run(request):
            return Response(services.preview_delete_quota(actor=request.user, quota=quota))
        services.delete_quota(actor=request.user, quota=quota)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        request=ScaleSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(QuotaSerializer, "QuotaOrDryRun")},
    )
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        """Set new guarantees; up needs room in the parent, down is allowed down to what the children hold."""
        quota = self.get_object()
        serializer = ScaleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        amounts = dict(serializer.validated_data)
        if _dry_run(request, amounts):
            return Response(services.preview_scale_quota(actor=request.user, quota=quota, **amounts))
        return self._represent(services.scale_quota(actor=request.user, quota=quota, **amounts))

    @extend_schema(
        request=TransferSerializer,
        parameters=[DRY_RUN_PARAMETER],
        responses={200: _or_dry_run(TransferResultSerializer, "TransferOrDryRun")},
    )
    @action(detail=False, methods=["post"])
    def transfer(self, request: Request) -> Response:
        """Move guarantee between two siblings in one step."""
        serializer = TransferSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        amounts = dict(serializer.validated_data)
        dry_run = _dry_run(request, amounts)
        source, target = amounts.pop("from"), amounts.pop("to")
        if dry_run:
            return Response(
                services.preview_transfer_quota(actor=request.user, source=source, target=target, **amounts)
            )
        moved_quotas = services.transfer_quota(actor=request.user, source=source, target=target, **amounts)
        moved = QuotaSerializer(moved_quotas, many=True, context=self.get_serializer_context()).data
        return Response({"from": moved[0], "to": moved[1]})


@extend_schema_view(
    partial_update=extend_schema(
        parameters=[DRY_RUN_PARAMETER], responses={200: _or_dry_run(NodeSerializer, "NodeOrDryRun")}
    )
)
class NodeViewSet(viewsets.ModelViewSet):  # type: ignore[type-arg]
    """The inventory. Platform admins write; signed-in users read."""

    serializer_class = NodeSerializer
    permission_classes = [PlatformAdminWritesOthersRead]
    filterset_class = NodeFilter

    def get_queryset(self) -> QuerySet[Node]:
        return selectors.node_list(user=self.request.user)

    def _represent(self, node: Node, *, status_code: int = status.HTTP_200_OK) -> Response:
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data, status=status_code)

    @extend_schema(parameters=[DRY_RUN_PARAMETER], responses={201: NodeSerializer, 200: DryRunResultSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        if _dry_run(request, fields):
            return Response(services.preview_create_node(actor=request.user, **fields))
        node = services.create_node(actor=request.user, **fields)
        return self._represent(node, status_code=status.HTTP_201_CREATED)

    @extend_schema(parameters=[DRY_RUN_PARAMETER], responses={200: _or_dry_run(NodeSerializer, "NodeOrDryRun")})
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        node = self.get_object()
        serializer = self.get_serializer(node, data=request.data, partial=kwargs.get("partial", False))
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        if _dry_run(request, changes):
            return Response(services.preview_update_node(actor=request.user, node=node, **changes))
        return self._represent(services.update_node(actor=request.user, node=node, **changes))

    @extend_schema(parameters=[DRY_RUN_PARAMETER], responses={204: None, 200: DryRunResultSerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        node = self.get_object()
        if _query_dry_run(request):
            return Response(services.preview_delete_node(actor=request.user, node=node))
        services.delete_node(actor=request.user, node=node)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _node_action(
        self,
        request: Request,
        preview: Callable[..., services.DryRunResult],
        change: Callable[..., Node],
    ) -> Response:
        """down, up, cordon, drain, uncordon: the node's state changed by `change`, or previewed by `preview`."""
        serializer = DryRunFlagSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        if _dry_run(request, dict(serializer.validated_data)):
            return Response(preview(actor=request.user, node=self.get_object()))
        return self._represent(change(actor=request.user, node=self.get_object()))

    @NODE_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def down(self, request: Request, pk: str | None = None) -> Response:
        """Take the node out of placement; guarantees still count it."""
        return self._node_action(
            request,
            partial(services.preview_set_node_state, state=NodeState.NOT_READY),
            partial(services.set_node_state, state=NodeState.NOT_READY),
        )

    @NODE_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def up(self, request: Request, pk: str | None = None) -> Response:
        return self._node_action(
            request,
            partial(services.preview_set_node_state, state=NodeState.READY),
            partial(services.set_node_state, state=NodeState.READY),
        )

    @extend_schema(request=None, responses={201: NodeTokenSerializer})
    @action(detail=True, methods=["post"], permission_classes=[IsPlatformAdmin])
    def token(self, request: Request, pk: str | None = None) -> Response:
        """A new token for the node's agent (AGENT.md), shown this once; the old one stops working."""
        token = node_agents.issue_node_token(actor=request.user, node=self.get_object())
        return Response({"token": token}, status=status.HTTP_201_CREATED)

    @NODE_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def cordon(self, request: Request, pk: str | None = None) -> Response:
        """Place no new job on the node (state `cordoned`); its jobs run on. Its idle GPUs leave the
        capacity that fair share divides. A `dry_run` previews the next cycle."""
        return self._node_action(request, services.preview_cordon_node, services.cordon_node)

    @NODE_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """Cordon the node and evict every job on it (rule `drain`), each after its grace period,
        back to the queue to run elsewhere. A `dry_run`'s preview lists the jobs evicted."""
        return self._node_action(request, services.preview_drain_node, services.drain_node)

    @NODE_ACTION_SCHEMA
    @action(detail=True, methods=["post"])
    def uncordon(self, request: Request, pk: str | None = None) -> Response:
        """A cordoned or draining node takes new jobs again (state `ready`)."""
        return self._node_action(request, services.preview_uncordon_node, services.uncordon_node)


class AuditLogViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Who changed what and when, newest first; platform admins only."""

    serializer_class = AuditRecordSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_class = AuditRecordFilter

    def get_queryset(self) -> QuerySet[AuditRecord]:
        return selectors.audit_log()
