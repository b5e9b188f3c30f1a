"""Workspaces, their members and roles, their quota bindings and the Scheduling Configurations rules.

Rules that span rows (a rule's quota is bound, a role name exists, guardian permissions follow
the membership) live in `workspaces.services`; the models hold the shape and per-row checks.
What a role may do is written down once, in `ROLE_PERMISSIONS` and `CustomRole.permissions`,
and mirrored into django-guardian object permissions on the workspace by the services, so the
permission choke point (`workspaces.permissions.restrict`) can answer with one query.
"""

from __future__ import annotations

from typing import Final

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from guardian.models import UserObjectPermissionBase

from quotas.models import Quota

# The capabilities a role grants inside its workspace (the API's permission codenames).
JOB_SUBMIT: Final = "job.submit"
JOB_MANAGE_ALL: Final = "job.manage_all"
WORKSPACE_MANAGE: Final = "workspace.manage"
CAPABILITIES: Final = (JOB_SUBMIT, JOB_MANAGE_ALL, WORKSPACE_MANAGE)

# Each capability is held as a guardian object permission on the workspace (Workspace.Meta.permissions).
CAPABILITY_CODENAMES: Final = {
    JOB_SUBMIT: "submit_jobs",
    JOB_MANAGE_ALL: "manage_all_jobs",
    WORKSPACE_MANAGE: "manage_workspace",
}


class BasicRole(models.TextChoices):
    ADMIN = "admin", "Workspace admin"
    DEVELOPER = "developer", "Developer"
    OPERATOR = "operator", "Operator (manages every job of the workspace)"
    LABELING_ADMIN = "labeling_admin", "Labeling admin"
    VISITOR = "visitor", "Visitor (reads only)"


# Every member sees the workspace and its jobs; these are what the basic roles add to that.
ROLE_PERMISSIONS: Final[dict[str, frozenset[str]]] = {
    BasicRole.ADMIN: frozenset({JOB_SUBMIT, JOB_MANAGE_ALL, WORKSPACE_MANAGE}),
    BasicRole.OPERATOR: frozenset({JOB_SUBMIT, JOB_MANAGE_ALL}),
    BasicRole.DEVELOPER: frozenset({JOB_SUBMIT}),
    BasicRole.LABELING_ADMIN: frozenset({JOB_SUBMIT}),
    BasicRole.VISITOR: frozenset(),
}


class Workspace(models.Model):
    """A team's room: its members, the quotas it may use, and who of them may use which."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    quotas: models.ManyToManyField[Quota, QuotaBinding] = models.ManyToManyField(
        Quota, through="QuotaBinding", related_name="workspaces", blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        permissions = [
            ("submit_jobs", "Submit jobs to the workspace's quotas (subject to its rules)"),
            ("manage_all_jobs", "Manage every job of the workspace"),
            ("manage_workspace", "Edit members, roles, scheduling configuration and description"),
        ]

    def __str__(self) -> str:
        return self.name


class WorkspaceUserPermission(UserObjectPermissionBase):
    """Guardian's object permissions on a workspace, with a real foreign key so filters stay joins."""

    content_object = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="user_permissions")

    class Meta(UserObjectPermissionBase.Meta):
        abstract = False


class QuotaBinding(models.Model):
    """The workspace may submit jobs to this quota (who exactly: its scheduling rules)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="bindings")
    quota = models.ForeignKey(Quota, on_delete=models.PROTECT, related_name="bindings")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "quota"], name="quota_bound_once_per_workspace")]

    def __str__(self) -> str:
        return f"{self.workspace} → {self.quota}"


class CustomRole(models.Model):
    """A named set of capabilities (`CAPABILITIES`) that a workspace admin defines."""

    # Rows of a workspace: restrict() shows them to its members, workspace admins change them.
    workspace_field = "workspace"
    manage_capability = WORKSPACE_MANAGE

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="custom_roles")
    name = models.CharField(max_length=100)
    permissions = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="custom_role_name_unique")]

    def __str__(self) -> str:
        return f"{self.workspace}/{self.name}"


class Membership(models.Model):
    """A user's role in a workspace: a basic role slug or the name of one of its custom roles."""

    # Rows of a workspace: restrict() shows them to its members, workspace admins change them.
    workspace_field = "workspace"
    manage_capability = WORKSPACE_MANAGE

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workspace_memberships")
    role = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} as {self.role}"


class SchedulingRule(models.Model):
    """Who may use one bound quota of the workspace, and with which caps.

    Several rules may name the same quota: a user may use it when any rule admits them, and
    then every cap of every admitting rule that covers the job's priority applies.
    """

    # Rows of a workspace: restrict() shows them to its members, workspace admins change them.
    workspace_field = "workspace"
    manage_capability = WORKSPACE_MANAGE

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="rules")
    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="scheduling_rules")
    roles = models.JSONField(default=list, blank=True)
    non_members = models.BooleanField(default=False)
    authorized_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="authorized_scheduling_rules"
    )
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["workspace_id", "position", "id"]

    def __str__(self) -> str:
        return f"{self.workspace}: {self.quota}"


class Cap(models.Model):
    """GPU limits for jobs whose priority lies in [priority_min, priority_max]; None: no cap."""

    rule = models.ForeignKey(SchedulingRule, on_delete=models.CASCADE, related_name="caps")
    priority_min = models.PositiveSmallIntegerField()
    priority_max = models.PositiveSmallIntegerField()
    max_gpus_per_job = models.FloatField(null=True, blank=True)
    max_gpus_per_user = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["rule_id", "priority_min", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(priority_min__gte=1) & Q(priority_max__lte=9) & Q(priority_min__lte=F("priority_max")),
                name="cap_priority_range_valid",
            ),
            models.CheckConstraint(
                condition=(Q(max_gpus_per_job__isnull=True) | Q(max_gpus_per_job__gte=0))
                & (Q(max_gpus_per_user__isnull=True) | Q(max_gpus_per_user__gte=0)),
                name="cap_amounts_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"priorities {self.priority_min}-{self.priority_max}"

    def covers(self, priority: int) -> bool:
        return self.priority_min <= priority <= self.priority_max
