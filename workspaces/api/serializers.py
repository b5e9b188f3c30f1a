"""Shapes of the workspaces API: names in bodies, ids in URLs; rules are checked in services."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from rest_framework import serializers

from quotas import bounds
from quotas.api.serializers import text, within
from quotas.models import Quota
from utilities.json_types import JsonTypedMixin
from workspaces.models import CustomRole, Membership, Workspace


class WorkspaceSerializer(JsonTypedMixin, serializers.ModelSerializer[Workspace]):
    quotas = serializers.SlugRelatedField(
        many=True, slug_field="name", queryset=Quota.objects.all(), required=False, help_text="Bound quotas, by name."
    )

    class Meta:
        model = Workspace
        fields = ["id", "name", "description", "quotas"]
        read_only_fields = ["id"]
        extra_kwargs: dict[str, dict[str, Any]] = {
            "name": text("name", bounds.NAME_MAX_LENGTH),
            "description": text("description", bounds.DESCRIPTION_MAX_LENGTH, blank=True),
        }


class MembershipSerializer(JsonTypedMixin, serializers.ModelSerializer[Membership]):
    user = serializers.SlugRelatedField(slug_field="username", queryset=get_user_model().objects.all())
    role = serializers.CharField(
        **text("role", bounds.NAME_MAX_LENGTH),
        help_text="admin, developer, operator, labeling_admin, visitor or a custom role's name.",
    )

    class Meta:
        model = Membership
        fields = ["id", "user", "role"]
        read_only_fields = ["id"]

    def validate_user(self, user: Any) -> Any:
        # Whose membership it is never changes; remove it and add another instead.
        if self.instance is not None and user.pk != self.instance.user_id:
            raise serializers.ValidationError("A membership's user cannot change; remove it and add the other user.")
        return user


class CustomRoleSerializer(JsonTypedMixin, serializers.ModelSerializer[CustomRole]):
    permissions = serializers.ListField(
        child=serializers.CharField(**text("a permission", bounds.NAME_MAX_LENGTH)),
        max_length=bounds.ROLE_PERMISSIONS_MAX,
        error_messages={"max_length": "a role lists at most {max_length} permissions."},
        help_text="job.submit, job.manage_all, workspace.manage.",
    )

    class Meta:
        model = CustomRole
        fields = ["id", "name", "permissions"]
        read_only_fields = ["id"]
        extra_kwargs: dict[str, dict[str, Any]] = {"name": text("name", bounds.NAME_MAX_LENGTH)}

    def validate_name(self, name: str) -> str:
        # Members and rules refer to a role by its name, so a rename would silently strand them.
        if self.instance is not None and name != self.instance.name:
            raise serializers.ValidationError("A role cannot be renamed; create a new one and move its members.")
        return name


class CapSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    priority_min = serializers.IntegerField(**within("priority_min", 9, least=1))
    priority_max = serializers.IntegerField(**within("priority_max", 9, least=1))
    max_gpus_per_job = serializers.FloatField(
        required=False, allow_null=True, default=None, **within("max_gpus_per_job", bounds.CAP_GPUS_MAX)
    )
    max_gpus_per_user = serializers.FloatField(
        required=False, allow_null=True, default=None, **within("max_gpus_per_user", bounds.CAP_GPUS_MAX)
    )


class RuleSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    quota = serializers.CharField(
        help_text="A quota bound to the workspace, by name.", **text("quota", bounds.NAME_MAX_LENGTH)
    )
    roles = serializers.ListField(
        child=serializers.CharField(**text("a role", bounds.NAME_MAX_LENGTH)),
        required=False,
        default=list,
        max_length=bounds.RULE_ROLES_MAX,
        error_messages={"max_length": "a rule lists at most {max_length} roles."},
    )
    non_members = serializers.BooleanField(required=False, default=False)
    authorized_users = serializers.ListField(
        child=serializers.CharField(**text("a user", 150)),
        required=False,
        default=list,
        max_length=bounds.RULE_USERS_MAX,
        error_messages={"max_length": "a rule lists at most {max_length} users."},
    )
    caps = CapSerializer(  # type: ignore[call-arg]  # DRF ≥ 3.15 takes max_length; the stubs lag
        many=True,
        required=False,
        default=list,
        max_length=bounds.RULE_CAPS_MAX,
        error_messages={"max_length": "a rule has at most {max_length} caps."},
    )


class SchedulingConfigSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    rules = RuleSerializer(  # type: ignore[call-arg]  # as above
        many=True,
        max_length=bounds.RULES_MAX,
        error_messages={"max_length": "a workspace has at most {max_length} rules."},
    )
