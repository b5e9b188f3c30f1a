from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A bound quota must not be deleted under a workspace; only this app knows the bindings.
        from quotas import hooks
        from workspaces.selectors import quota_binding_blocker

        hooks.register_quota_delete_guard(quota_binding_blocker)
