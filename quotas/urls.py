"""Page routes of quotas, mounted by console.urls."""

from django.urls import path

from quotas import views

urlpatterns = [
    path("quotas/", views.resource_quotas, name="resource-quotas"),
]
