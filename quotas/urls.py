"""Page routes of quotas, mounted by console.urls."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
