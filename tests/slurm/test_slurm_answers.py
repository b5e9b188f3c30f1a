"""What Slurm's answers mean to the console: GRES strings, bound devices, node availability and
exit statuses, as sinfo and squeue print them (the values are copied from Slurm 22.05's output)."""

from __future__ import annotations

import pytest

from slurm.client import SlurmJob, availability, gpus_of_gres, indices_of_gres


@pytest.mark.parametrize(
    ("gres", "gpus", "model"),
    [
        ("gpu:fake:2", 2, "fake"),
        ("gpu:8", 8, ""),
        ("gpu:a100:8(S:0-1)", 8, "a100"),
        ("nic:1,gpu:h100:4", 4, "h100"),
        ("", 0, ""),
        ("(null)", 0, ""),
        ("nic:2", 0, ""),
    ],
)
def test_gpus_and_model_of_a_nodes_gres(gres: str, gpus: int, model: str) -> None:
    assert gpus_of_gres(gres) == (gpus, model)


@pytest.mark.parametrize(
    ("details", "indices"),
    [
        (["gpu:fake:1(IDX:0)"], (0,)),
        (["gpu:fake:2(IDX:0-1)"], (0, 1)),
        (["gpu:a100:3(IDX:0,2-3)"], (0, 2, 3)),
        (["gpu:fake:0(IDX:N/A)"], ()),
        (["nic:1(IDX:0)", "gpu:2(IDX:4-5)"], (4, 5)),
        ([], ()),
    ],
)
def test_the_devices_slurm_bound(details: list[str], indices: tuple[int, ...]) -> None:
    assert indices_of_gres(details) == indices


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("idle", [], "up"),
        ("mixed", [], "up"),
        ("allocated", ["COMPLETING"], "up"),
        ("idle", ["DRAIN"], "drain"),
        ("mixed", ["DRAIN"], "drain"),
        ("down", [], "down"),
        ("idle", ["NOT_RESPONDING"], "down"),
        ("down", ["DRAIN"], "down"),
        ("unknown", [], "down"),
        ("idle", ["INVALID_REG", "DRAIN"], "down"),
    ],
)
def test_a_nodes_availability(state: str, flags: list[str], expected: str) -> None:
    assert availability(state, flags) == expected


@pytest.mark.parametrize(
    ("status", "code"),
    [(0, 0), (3 << 8, 3), (255 << 8, 255), (9, 137), (15, 143)],
)
def test_an_exit_status_as_a_shell_reports_it(status: int, code: int) -> None:
    job = SlurmJob(
        slurm_id=1, name="gqc-1-1", comment="", state="FAILED", reason="", nodes="n1", exit_status=status,
        gpu_indices=(), gpus=0,
    )  # fmt: skip
    assert job.exit_code == code
