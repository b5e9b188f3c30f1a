"""Placeholder until the engine lands: admits nothing."""

from scheduling.engine.types import CycleResult, Snapshot


def schedule(snapshot: Snapshot) -> CycleResult:
    return CycleResult(decisions=())
