"""The API's pagination: DRF's limit/offset, with the bounds the schema publishes enforced."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

from quotas import bounds


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """`?limit=` and `?offset=` as the schema states them: whole numbers, limit 1 to
    PAGE_SIZE_MAX, offset 0 to OFFSET_MAX (past SQLite's integers a slice crashes). DRF's own
    class quietly falls back to defaults on `offset=false` or `limit=-3`; a client that sends
    those has a bug, so it hears of it."""

    max_limit = bounds.PAGE_SIZE_MAX

    def get_limit(self, request: Request) -> int | None:
        return self._whole(request, self.limit_query_param, least=1, most=self.max_limit, default=self.default_limit)

    def get_offset(self, request: Request) -> int:
        return self._whole(request, self.offset_query_param, least=0, most=bounds.OFFSET_MAX, default=0) or 0

    @staticmethod
    def _whole(request: Request, name: str, *, least: int, most: int, default: int | None) -> int | None:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        # `?limit=` is not a number either: a client that sends it has lost a value on the way.
        if not raw.isdigit() or not raw.isascii():
            raise ValidationError({name: [f"{name} must be a whole number, got {raw[:40]!r}."]})
        value = int(raw)
        if not least <= value <= most:
            raise ValidationError({name: [f"{name} must be from {least} to {most:,}, got {raw[:40]}."]})
        return value

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["schema"].update({"minimum": 1, "maximum": self.max_limit})
            elif parameter["name"] == self.offset_query_param:
                parameter["schema"].update({"minimum": 0, "maximum": bounds.OFFSET_MAX})
        return parameters
