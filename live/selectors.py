"""Reads of the live socket: which topics a user may hear, and whether the socket's sign-in holds.

Every check goes through the pages' and the API's `restrict()` (nodes through quotas'
`visible_nodes`), one query per topic kind, so a subscribe message of 200 topics costs at most
five queries. A missing topic and a forbidden one give the same answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.contrib.sessions.models import Session
from django.db.models import Model, QuerySet
from django.utils import timezone

from quotas import selectors as quota_selectors
from quotas.models import Quota
from scheduling.models import Job
from workspaces.models import Workspace
from workspaces.permissions import restrict

TOPIC_PATTERN: Final = re.compile(
    r"^(?:(?P<whole>cluster|nodes)|(?P<kind>quota|job|node|workspace):(?P<id>[1-9][0-9]{0,17}))$"
)
MAX_TOPIC_LENGTH: Final = 40

Viewer = AbstractBaseUser | AnonymousUser


def parse_topic(topic: object) -> tuple[str, int | None] | None:
    """(`kind`, id) of a well-formed topic (`("cluster", None)`, `("nodes", None)` for the
    topics without an id), None otherwise."""
    if not isinstance(topic, str) or len(topic) > MAX_TOPIC_LENGTH:
        return None
    match = TOPIC_PATTERN.match(topic)
    if match is None:
        return None
    if match["whole"] is not None:
        return (match["whole"], None)
    return (match["kind"], int(match["id"]))


def visible_topics(user: Viewer, topics: Iterable[str]) -> set[str]:
    """The well-formed topics of `topics` that `user` may hear now."""
    if not user.is_authenticated:
        return set()
    ids_by_kind: dict[str, set[int]] = {}
    visible: set[str] = set()
    for topic in topics:
        parsed = parse_topic(topic)
        if parsed is None:
            continue
        kind, object_id = parsed
        if kind == "cluster":
            visible.add("cluster")  # aggregate figures only: every signed-in user hears them
        elif kind == "nodes":
            if may_watch_all_nodes(user):
                visible.add("nodes")
        elif object_id is not None:
            ids_by_kind.setdefault(kind, set()).add(object_id)
    for kind, ids in ids_by_kind.items():
        rows = _visible(kind, user).filter(pk__in=sorted(ids)).values_list("pk", flat=True)
        visible.update(f"{kind}:{pk}" for pk in rows)
    return visible


def may_watch_all_nodes(user: Viewer) -> bool:
    """`nodes`, every node's GPU cells in one topic, is the Nodes page's, and the page is for
    platform admins: the user `restrict()` lets do everything (its superuser rule)."""
    return bool(user.is_authenticated and getattr(user, "is_superuser", False))


def _visible(kind: str, user: Viewer) -> QuerySet[Model]:
    querysets: dict[str, QuerySet[Model]] = {
        "job": restrict(Job.objects.all(), user, "view"),
        "quota": restrict(Quota.objects.all(), user, "view"),
        "workspace": restrict(Workspace.objects.all(), user, "view"),
        "node": quota_selectors.visible_nodes(user),
    }
    return querysets[kind]


def current_user(*, user_id: int, session_key: str | None) -> AbstractBaseUser | None:
    """The socket's user as the database has it now, or None once they may no longer be signed
    in: deactivated, or (for a browser socket) their session ended: logged out, signed out
    everywhere, expired."""
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return None
    if session_key is not None:
        alive = Session.objects.filter(session_key=session_key, expire_date__gt=timezone.now()).exists()
        if not alive:
            return None
    return user


Verdict = tuple[bool, set[str]]


def still_visible(sockets: Sequence[tuple[int, str | None, Sequence[str]]]) -> list[Verdict]:
    """For each socket (user id, session key, topics): whether its user may still be signed in
    (as `current_user`) and which of its topics they may still hear. Every socket of a web
    process in one pass: two queries for the sign-ins, then `visible_topics` once per user with
    id topics (a socket of `cluster` alone costs nothing more)."""
    user_ids = {user_id for user_id, _, _ in sockets}
    users = {user.pk: user for user in get_user_model().objects.filter(pk__in=user_ids, is_active=True)}
    keys = {key for _, key, _ in sockets if key is not None}
    alive = set(
        Session.objects.filter(session_key__in=keys, expire_date__gt=timezone.now()).values_list(
            "session_key", flat=True
        )
    )
    topics_by_user: dict[int, set[str]] = {}
    for user_id, _, topics in sockets:
        topics_by_user.setdefault(user_id, set()).update(topics)
    visible_by_user = {
        user_id: visible_topics(users[user_id], topics)
        for user_id, topics in topics_by_user.items()
        if user_id in users
    }
    verdicts: list[Verdict] = []
    for user_id, key, topics in sockets:
        signed_in = user_id in users and (key is None or key in alive)
        verdicts.append((signed_in, visible_by_user.get(user_id, set()) & set(topics) if signed_in else set()))
    return verdicts
