"""The heartbeat answered without Django's request cycle (console.agent_route calls quick_beat):
the same answer AgentHeartbeatView gives a well-formed beat of a known token's own node, and
whether the route may hold it for the cycle on its way to that node (console.agent_holds); once
that cycle has placed, answer_held answers the held beat anew."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from rest_framework.renderers import JSONRenderer

from quotas.models import NodeAgent
from quotas.node_agents import NodeTokenRevoked, agent_for_token
from scheduling import agent_services, triggers
from scheduling.api.agent import _desired_body, accept_beat


@dataclass(frozen=True, slots=True)
class HeldBeat:
    """A held beat as its second answer needs it: read, validated and its token looked up once,
    by the first (its body is not decoded nor checked again), with what the first took that a
    second must not take again (the log lines; the GPU readings are never passed on)."""

    agent: NodeAgent
    processes: tuple[agent_services.ProcessReport, ...]


@dataclass(frozen=True, slots=True)
class QuickAnswer:
    """A beat's answer, and the node whose cycle it may wait for: set when the answer asks the
    agent back soon for what that cycle places (it freed devices) and carries nothing to do;
    `held` is then what answer_held answers anew."""

    body: bytes
    hold_for: int | None = None
    held: HeldBeat | None = None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # as DRF's strict JSONParser refuses NaN and Infinity


def quick_beat(*, authorization: bytes, body: bytes, again: bool = False) -> QuickAnswer | None:
    """AgentHeartbeatView's answer to a well-formed beat of a known token's own node, given
    without Django's request cycle; None for anything else, which that view then answers in
    full: its 400s, 401s and 403s are worded there alone.

    Each check mirrors one the view makes (token scheme, strict UTF-8 JSON, accept_beat, the
    token's own node), so the two answer a beat alike (tests/scheduling/test_agent_route.py).

    `again`: the same beat once more, after the route held it. A beat is idempotent (AGENT.md)
    but for what it carries on top of the processes' states: the log lines, which would be
    appended twice, and the GPU readings, stored twice; both were taken the first time."""
    words = authorization.split()
    if len(words) != 2 or words[0].lower() != b"node":
        return None
    try:
        token = words[1].decode("ascii")
        payload = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except ValueError:  # UnicodeError and json's errors alike
        return None
    agent = agent_for_token(token)
    accepted = accept_beat(payload)
    if agent is None or accepted is None or accepted[0] != agent.node.name:
        return None
    _node, processes, samples = accepted
    if again:
        return answer_held(_held(agent, processes))
    try:
        desired = agent_services.heartbeat(agent=agent, processes=processes)
    except NodeTokenRevoked:
        return None  # rolled back, and forgotten here: the view answers the 401
    agent_services.report_gpu_samples(agent=agent, samples=samples)
    hold = desired.follow_up and not desired.starts and not desired.stops and triggers.trigger_mode() == "celery"
    if not hold:
        return QuickAnswer(_rendered(desired))
    return QuickAnswer(_rendered(desired), agent.node.pk, _held(agent, processes))


def answer_held(beat: HeldBeat) -> QuickAnswer | None:
    """The held beat's answer anew (the same beat once more, as `quick_beat(again=True)`), from
    what its first answer read: in the drain benchmark of issue 25 a third of the beats were held
    and answered twice. None when its token was revoked meanwhile (the first answer then goes)."""
    try:
        desired = agent_services.heartbeat(agent=beat.agent, processes=beat.processes)
    except NodeTokenRevoked:
        return None
    return QuickAnswer(_rendered(desired))


def _held(agent: NodeAgent, processes: list[agent_services.ProcessReport]) -> HeldBeat:
    return HeldBeat(agent, tuple(dataclasses.replace(report, log=(), log_truncated=False) for report in processes))


def _rendered(desired: agent_services.Desired) -> bytes:
    answer: bytes = JSONRenderer().render(_desired_body(desired))
    return answer
