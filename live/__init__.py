"""The live layer (issue 12): one websocket, `/ws/live/`, with topics checked by `restrict()`."""
