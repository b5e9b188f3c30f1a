"""`manage.py load_inventory FILE`: create or update the nodes of a YAML file's `nodes:` list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas import selectors, services


class Command(BaseCommand):
    help = (
        "Load nodes from a YAML file with a `nodes:` list in the scenario format "
        "({name, count?, gpus, cpu?, memory_gib?, gpu_model?, labels?, state?}; count>1 expands to "
        "name-1 … name-N). Idempotent by node name; all or nothing; other keys of the file are ignored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="YAML file with a nodes: list")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error.strerror}.", returncode=2) from None
        except yaml.YAMLError as error:
            raise CommandError(f"{path} is not valid YAML: {error}", returncode=2) from None
        if not isinstance(document, dict) or "nodes" not in document:
            raise CommandError(f"{path} has no top-level `nodes:` list.", returncode=2)
        try:
            result = services.load_inventory(actor=None, nodes=document["nodes"])
        except ValidationError as error:
            lines = [message for messages in services.error_messages(error).values() for message in messages]
            raise CommandError(f"{path}: nothing was loaded.\n" + "\n".join(lines), returncode=2) from None
        pool = selectors.default_pool()
        capacity = selectors.pool_capacity(pool=pool) if pool is not None else None
        self.stdout.write(
            f"{len(result['created'])} created, {len(result['updated'])} updated, {len(result['unchanged'])} unchanged."
        )
        if capacity is not None:
            self.stdout.write(
                f"Pool {pool}: {capacity['nodes']} nodes ({capacity['ready_nodes']} ready), "
                f"{capacity['gpus']:g} GPUs ({capacity['ready_gpus']:g} ready)."
            )
