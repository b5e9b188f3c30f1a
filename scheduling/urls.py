"""Page routes of scheduling, mounted by console.urls."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
