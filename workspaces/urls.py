"""Page routes of workspaces, mounted by console.urls."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
