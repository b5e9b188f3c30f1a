"""What Slurm's answers mean to the console: GRES strings, bound devices, node availability and
exit statuses, as sinfo and squeue print them (the values are copied from Slurm 22.05's output)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm.arrays import ArrayTask, array_indices, array_output, array_script
from slurm.client import (
    SlurmJob,
    SlurmUnavailable,
    availability,
    devices_path,
    expand_hostlist,
    gpus_of_gres,
    held_of_scontrol,
    indices_of_gres,
    job_of_squeue_line,
    read_devices_file,
)


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


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("s[0009-0011,0020]", ["s0009", "s0010", "s0011", "s0020"]),
        ("n[1-2],gpu01", ["n1", "n2", "gpu01"]),
        ("a,b[1-2]x", ["a", "b1x", "b2x"]),
        ("", []),
    ],
)
def test_a_slurm_host_list_expanded(hostlist: str, names: list[str]) -> None:
    assert expand_hostlist(hostlist) == names


def test_each_nodes_devices_in_scontrols_answer() -> None:
    # `scontrol -d -o show job 4` for a job over two nodes (cut), and one over two alike nodes.
    text = (
        "JobId=4 JobName=multi JobState=RUNNING NodeList=n[1-2] JOB_GRES=gpu:fake:2   "
        "Nodes=n1 CPU_IDs=1 Mem=100 GRES=gpu:fake:1(IDX:2)   Nodes=n2 CPU_IDs=0 Mem=100 GRES=gpu:fake:1(IDX:0) "
        "MinCPUsNode=1"
    )
    assert held_of_scontrol(text) == (("n1", (2,)), ("n2", (0,)))
    alike = "JobId=5 Nodes=n[1-2] CPU_IDs=0-1 Mem=200 GRES=gpu:fake:2(IDX:0-1) MinCPUsNode=1"
    assert held_of_scontrol(alike) == (("n1", (0, 1)), ("n2", (0, 1)))
    assert held_of_scontrol("JobId=6 Nodes=n1 CPU_IDs=0 Mem=100 GRES= MinCPUsNode=1") == ()


def test_a_line_of_squeues_text() -> None:
    # squeue --array --noheader --Format=JobID:|,State:|,exit_code:|,NodeList:|,tres-per-node:|,Reason:|,
    # ArrayJobID:|,ArrayTaskID:|,Name:|
    failed = job_of_squeue_line("2|FAILED|768|n1|gres:gpu:1|NonZeroExitCode|2|N/A|gqc-1-1|")
    assert (failed.slurm_id, failed.state, failed.exit_code, failed.gpus, failed.live) == (2, "FAILED", 3, 1, False)
    assert failed.name == "gqc-1-1" and failed.reason == "NonZeroExitCode"
    assert (failed.key, failed.label) == ((2, None), "2")
    running = job_of_squeue_line("4|RUNNING|0|n[1-2]|(null)|None|4|N/A|a|b|")
    assert (running.name, running.nodes, running.gpus, running.live) == ("a|b", "n[1-2]", 0, True)
    # Task 3 of array 7: started, it has a job id of its own; pending, the array's.
    task = job_of_squeue_line("9|RUNNING|0|n1|gres:gpu:1|None|7|3|gqc-1-1|")
    assert (task.slurm_id, task.key, task.label) == (9, (7, 3), "7_3")
    waiting = job_of_squeue_line("7|PENDING|0||gres:gpu:1|Resources|7|4|gqc-1-1|")
    assert (waiting.key, waiting.label) == ((7, 4), "7_4")
    with pytest.raises(SlurmUnavailable):
        job_of_squeue_line("slurm_load_jobs error: Unable to contact slurm controller")


def test_the_devices_a_jobs_script_wrote(tmp_path: Path) -> None:
    output = str(tmp_path / "gqc-x-1-1.out")
    assert read_devices_file(output) is None
    Path(devices_path(output)).write_text("0,1")
    assert read_devices_file(output) is None  # the line is not ended: still being written
    Path(devices_path(output)).write_text("0,1,4-5\n")
    assert read_devices_file(output) == (0, 1, 4, 5)
    Path(devices_path(output)).write_text("\n")
    assert read_devices_file(output) == ()


def test_an_arrays_script_runs_each_tasks_own_command_and_environment(tmp_path: Path) -> None:
    # Task ids as sbatch --array lists them, gaps included (a replica claimed by another process).
    tricky = """printf '%s|%s|%s\\n' "$GQC_REPLICA_RANK" "$NOTE" 'done;; esac'"""
    tasks = {
        0: ArrayTask("echo zero $GQC_REPLICA_RANK", {"GQC_REPLICA_RANK": "0"}, str(tmp_path / "t0.gpus")),
        2: ArrayTask(tricky, {"GQC_REPLICA_RANK": "1", "NOTE": "a,b 'c' $HOME"}),
        3: ArrayTask("exec sh -c 'exit 7'", {}),
    }
    assert array_indices(tasks) == "0,2-3"
    assert array_indices({index: tasks[0] for index in range(8)}) == "0-7"
    assert array_output("/out/gqc-x-1-1_%a.out", 5) == "/out/gqc-x-1-1_5.out"
    script = tmp_path / "script.sh"
    script.write_text(array_script(tasks))

    def run(task: str) -> subprocess.CompletedProcess[str]:
        environment = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": task, "SLURM_JOB_GPUS": "3,5"}
        return subprocess.run(["sh", str(script)], env=environment, capture_output=True, text=True, check=False)

    assert run("0").stdout == "zero 0\n"
    # Slurm's devices written first, as a script of its own did.
    assert read_devices_file(str(tmp_path / "t0")) == (3, 5)
    assert run("2").stdout == "1|a,b 'c' $HOME|done;; esac\n"
    assert run("3").returncode == 7
    assert run("1").returncode == 1 and "no replica for array task 1" in run("1").stderr
