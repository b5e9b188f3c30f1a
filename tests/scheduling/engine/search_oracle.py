"""The oracle of the victim-search shortcuts (`actions.preempt.futile_*`): wherever a shortcut
answers, the full search is run on the same session (it rolls back when it fails) and must fail
having examined as many candidates as the shortcut said."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.engine.actions import preempt, reclaim
from scheduling.engine.session import Session


def check_shortcut(patch: pytest.MonkeyPatch, name: str, answered: list[int]) -> None:
    """`reclaim.<name>` (the shortcut `preempt.<name>`: a count of candidates, or None) replaced by
    one whose every answer is checked against the full search and appended to `answered`."""
    shortcut = getattr(preempt, name)

    def checked(session: Session, job: int, *rest: Any) -> int | None:
        count: int | None = shortcut(session, job, *rest)
        if count is not None:
            patch.setattr(reclaim, name, lambda *_args: None)
            try:
                assert reclaim.search_victims(session, job) == (False, count)
            finally:
                patch.setattr(reclaim, name, checked)
            answered.append(count)
        return count

    patch.setattr(reclaim, name, checked)
