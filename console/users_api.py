"""`users/`: platform admins create accounts; everyone signed in may read their own."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db.models import QuerySet
from rest_framework import mixins, serializers, viewsets

from console import services
from console.json_types import JsonTypedMixin
from quotas.api.permissions import IsPlatformAdmin

User = get_user_model()


class UserSerializer(JsonTypedMixin, serializers.ModelSerializer[AbstractUser]):
    password = serializers.CharField(write_only=True, min_length=8, style={"input_type": "password"})
    is_platform_admin = serializers.BooleanField(source="is_superuser", default=False)

    class Meta:
        model = User
        fields = ["id", "username", "password", "email", "is_platform_admin"]
        read_only_fields = ["id"]

    def create(self, validated_data: dict[str, Any]) -> AbstractUser:
        request = self.context["request"]
        return services.create_user(
            actor=request.user,
            username=validated_data["username"],
            password=validated_data["password"],
            email=validated_data.get("email", ""),
            is_platform_admin=validated_data.get("is_superuser", False),
        )


class UserViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[AbstractUser],
):
    serializer_class = UserSerializer
    permission_classes = [IsPlatformAdmin]

    def get_queryset(self) -> QuerySet[AbstractUser]:
        return User.objects.order_by("id")
