"""`manage.py agent …`: the node agent (gqc.agent) from a checkout; the same program as `python -m gqc.agent`.

It touches neither the database nor Redis: the arguments go straight to the agent, without
Django's system checks, and the agent speaks only HTTP to the console.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand

from gqc import agent


class Command(BaseCommand):
    help = "Run the node agent: --server URL --node NAME --token-file PATH [--fake-gpus N] [--state-dir DIR]"
    requires_system_checks: list[str] = []

    def run_from_argv(self, argv: list[str]) -> None:
        sys.exit(agent.main(argv[2:]))

    def handle(self, *args: str, **options: object) -> None:  # pragma: no cover - run_from_argv runs it
        sys.exit(agent.main(list(args)))
