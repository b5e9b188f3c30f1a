"""The OpenAPI schema's error responses, so the schema says every status the API answers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent

_ERROR_COMPONENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "ValidationErrors": (
        "The request was refused; each field that is wrong lists sentences naming the numbers. "
        "A nested field is named by its path (rules[0].caps[1].priority_max); errors not tied "
        "to a field are under non_field_errors.",
        {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "example": {"gpus": ["gpus must be at most 64, got 1000000000."]},
        },
    ),
    "ErrorDetail": (
        "Why the request was refused, in one sentence.",
        {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]},
    ),
}


class ConsoleAutoSchema(AutoSchema):
    """Every operation documents the errors it can answer, in the shapes `exception_handler`
    gives them: 400 where the client sends a body or query, 401 and 403 everywhere, 404 where
    the path names an object. Clients (and the fuzzer) then meet no undocumented status."""

    def get_operation(
        self, path: str, path_regex: str, path_prefix: str, method: str, registry: Any
    ) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses = operation.setdefault("responses", {})
        errors = {"401": "ErrorDetail", "403": "ErrorDetail"}
        if "requestBody" in operation or operation.get("parameters"):
            errors["400"] = "ValidationErrors"
        if "{" in path:
            errors["404"] = "ErrorDetail"
        for code, component in errors.items():
            if code not in responses:
                description, _ = _ERROR_COMPONENTS[component]
                responses[code] = {
                    "content": {"application/json": {"schema": self._error_component(component)}},
                    "description": description,
                }
        return operation

    def _error_component(self, name: str) -> dict[str, str]:
        _, schema = _ERROR_COMPONENTS[name]
        component = ResolvedComponent(  # type: ignore[no-untyped-call]  # drf-spectacular ships no types here
            name=name, type=ResolvedComponent.SCHEMA, object=name, schema=schema
        )
        self.registry.register_on_missing(component)
        return component.ref
