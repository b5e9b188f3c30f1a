from typing import Any

from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "live"
    verbose_name = "Live updates"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        user_logged_out.connect(_signed_out, dispatch_uid="live.signed_out")


def _signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Django's own logout view writes no service of ours; its signal tells the user's sockets to
    re-check their session (the socket of the session just ended closes)."""
    from workspaces.access import notify_access_changed

    if user is not None and getattr(user, "pk", None) is not None:
        notify_access_changed(user_ids=[int(user.pk)])
