"""Node tokens on the wire: `Authorization: Node <token>`, accepted by the agent endpoints alone.

The agent endpoints list only `NodeTokenAuthentication`, so a user's token or session is not even
looked at there (401). Every other endpoint lists the user authentications only, which do not
know the `Node` scheme (401), and a node token sent as `Token …` is not in DRF's token table
(401 as well): a node token opens nothing but its own node's agent endpoints.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import permissions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.views import APIView

from quotas.models import NodeAgent
from quotas.node_agents import REVOKED, agent_for_token

KEYWORD = "Node"


class NodeTokenAuthentication(BaseAuthentication):
    """The request comes from the agent of `request.auth.node`; `request.user` stays anonymous,
    so nothing that checks users (permissions, object filters) ever lets an agent through."""

    def authenticate(self, request: Request) -> tuple[Any, NodeAgent] | None:
        words = get_authorization_header(request).split()
        if not words or words[0].lower() != KEYWORD.lower().encode():
            return None
        if len(words) != 2:
            raise AuthenticationFailed("Send the node token as `Authorization: Node <token>`, with no spaces in it.")
        try:
            token = words[1].decode()
        except UnicodeError:
            raise AuthenticationFailed("A node token is plain ASCII.") from None
        agent = agent_for_token(token)
        if agent is None:
            raise AuthenticationFailed(REVOKED)
        return AnonymousUser(), agent

    def authenticate_header(self, request: Request) -> str:
        return KEYWORD


class IsNodeAgent(permissions.BasePermission):
    message = "Only a node's agent, with its node token, may call this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.auth, NodeAgent)


class NodeTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]  # untyped upstream
    """The schema names the scheme, so clients (and the fuzzer) see that user tokens are refused here."""

    target_class = "quotas.api.node_auth.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Node <token>`: a node token from POST /api/v1/nodes/{id}/token/ (agent endpoints only).",
        }
