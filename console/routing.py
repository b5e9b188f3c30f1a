"""Websocket routes; apps add theirs here (live GPU usage comes with the pages)."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
