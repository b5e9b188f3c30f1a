"""`users/`: platform admins create, read and change accounts (PATCH; `is_active: false`
deactivates one and revokes its tokens and sessions through console.services.update_user)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db.models import QuerySet
from rest_framework import mixins, serializers, viewsets

from console import services
from quotas.api.permissions import IsPlatformAdmin
from utilities.json_types import JsonTypedMixin

User = get_user_model()


class UserSerializer(JsonTypedMixin, serializers.ModelSerializer[AbstractUser]):
    password = serializers.CharField(write_only=True, min_length=8, style={"input_type": "password"})
    is_platform_admin = serializers.BooleanField(source="is_superuser", default=False)

    class Meta:
        model = User
        fields = ["id", "username", "password", "email", "is_platform_admin", "is_active"]
        read_only_fields = ["id"]
        extra_kwargs = {"is_active": {"default": True}}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # An update changes email, is_active and is_platform_admin; the username and password
        # are set at creation (a password change is the user's own, not an admin's PATCH).
        if self.instance is not None:
            fixed = sorted({"username", "password"} & set(self.initial_data))
            if fixed:
                raise serializers.ValidationError({name: [f"{name} cannot be changed here."] for name in fixed})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> AbstractUser:
        request = self.context["request"]
        return services.create_user(
            actor=request.user,
            username=validated_data["username"],
            password=validated_data["password"],
            email=validated_data.get("email", ""),
            is_platform_admin=validated_data.get("is_superuser", False),
        )

    def update(self, instance: AbstractUser, validated_data: dict[str, Any]) -> AbstractUser:
        return services.update_user(
            actor=self.context["request"].user,
            user=instance,
            email=validated_data.get("email"),
            is_active=validated_data.get("is_active"),
            is_platform_admin=validated_data.get("is_superuser"),
        )


class UserViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[AbstractUser],
):
    serializer_class = UserSerializer
    permission_classes = [IsPlatformAdmin]
    # PATCH only: a PUT would have to resend the password, which an update refuses.
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[AbstractUser]:
        return User.objects.order_by("id")
