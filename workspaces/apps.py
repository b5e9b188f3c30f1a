from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A bound quota must not be deleted under a workspace; only this app knows the bindings.
        from quotas import hooks
        from workspaces.permissions import restrict
        from workspaces.selectors import quota_binding_blocker

        hooks.register_quota_delete_guard(quota_binding_blocker)
        # Non-admins see the quotas bound to their workspaces (or opened to them by a rule).
        hooks.register_quota_visibility(lambda quotas, user: restrict(quotas, user, "view"))
