"""Account-level reads: the sign-ins a user holds."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.sessions.models import Session
from django.utils import timezone


def session_keys_of(user: AbstractBaseUser) -> list[str]:
    """Keys of the user's live database sessions.

    Django stores the user id only inside the encoded session data, so this decodes every live
    session: linear in live sessions, which is fine for a console's few hundred users and runs only
    on sign-out-everywhere and deactivation. It assumes the default database session engine."""
    user_id = str(user.pk)
    keys = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator(chunk_size=500):
        if str(session.get_decoded().get("_auth_user_id", "")) == user_id:
            keys.append(session.session_key)
    return keys
