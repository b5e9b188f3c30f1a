from tests.workspaces.permissions import persona_client, world

__all__ = ["persona_client", "world"]
