"""Websocket routes: the live layer's socket, and a last route that closes every other path
with 4404 (and a log line) instead of the router's exception, traceback and 500."""

from django.urls import URLPattern, path, re_path

from live.consumers import LiveConsumer, UnknownPathConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/live/", LiveConsumer.as_asgi()),
    re_path(r"", UnknownPathConsumer.as_asgi()),
]
