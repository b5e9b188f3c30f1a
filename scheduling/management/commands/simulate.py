"""`manage.py simulate FILE [--json]`: play a scenario (SCENARIOS.md) on a throwaway database.

The same submit service, cycle and simulated executor as the console run it, on a simulated
clock; the console's own database, cycle lock and live pages are never touched.
"""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduling.simulate import Checkpoint, ScenarioError, format_checkpoint, load_scenario, play, throwaway_database

BAD_SCENARIO_EXIT = 2


class Command(BaseCommand):
    help = "Play a scenario file through the scheduler on a throwaway database and print each checkpoint."
    # No system checks before the run, as `call_command` (every test of this command) already
    # runs it: they import the URLconf, and with it the whole API (rest_framework, drf_spectacular),
    # 0.3 s of a 1 s start that a simulation never uses. `manage.py check` and the suite keep them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", help="the scenario, a YAML file (see docs/scenarios/)")
        parser.add_argument("--json", action="store_true", help="one JSON object per checkpoint, one per line")

    from_command_line = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.from_command_line = True
        super().run_from_argv(argv)

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except ScenarioError as error:
            if self.from_command_line:
                # Django would print "CommandError: …" and a traceback hint; a bad scenario
                # gets its one sentence alone.
                self.stderr.write(str(error))
                sys.exit(BAD_SCENARIO_EXIT)
            raise CommandError(str(error), returncode=BAD_SCENARIO_EXIT) from error

    def handle(self, *args: Any, **options: Any) -> None:
        scenario = load_scenario(options["file"])
        as_json: bool = options["json"]
        first = True

        def show(checkpoint: Checkpoint) -> None:
            nonlocal first
            if as_json:
                self.stdout.write(json.dumps(checkpoint.as_json(), separators=(", ", ": ")))
            else:
                self.stdout.write(("" if first else "\n") + format_checkpoint(checkpoint))
            first = False

        with throwaway_database():
            play(scenario, on_checkpoint=show)
