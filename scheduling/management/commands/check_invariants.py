"""Check what must hold in the database whatever happened: after a crash, a load test, a restore.

Prints each violation as a sentence and exits 1 if there is any; prints one line and exits 0
otherwise. Reads only (`scheduling.selectors.invariant_violations`).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from scheduling.selectors import invariant_violations


class Command(BaseCommand):
    help = "Check the scheduling invariants (no GPU held twice, no quota above its limit, jobs and events agree)."

    def handle(self, *args: Any, **options: Any) -> None:
        violations = invariant_violations()
        if violations:
            for violation in violations:
                self.stderr.write(violation)
            raise CommandError(f"{len(violations)} invariant violation(s).")
        self.stdout.write("invariants hold: no GPU held twice, no quota above its limit, jobs and events agree.")
