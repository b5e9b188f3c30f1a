"""A real Slurm on this machine, for the tests (tests/slurm) and the drain benchmark
(benchmarks/slurm_drain.py): Debian's slurmctld and one `slurmd -N NAME` per emulated node, in a
directory of the caller's, on free ports, with fake GPUs (GRES files that are character devices
made with mknod, so that Slurm binds them and sets CUDA_VISIBLE_DEVICES).

Authentication is Slurm's auth/none and cred/none (the installed 22.05 has both): no munge daemon
to start, and nothing that another run on the machine could share. `SlurmdParameters=
config_overrides` lets each slurmd claim the CPUs and memory written in slurm.conf rather than
the host's. Plain Python: no Django, no pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol")
COMMAND_SECONDS = 10.0


def free_port(taken: set[int] | None = None) -> int:
    """A port free now, below the kernel's ephemeral range (32768 and up), so that no client
    connection of another process (squeue's, a test's) is handed it before the daemon binds it;
    none of `taken` (the ports already written in one slurm.conf: its daemons bind them only
    later), and added to it."""
    while True:
        port = random.randint(20000, 32000)
        if taken is not None and port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            if taken is not None:
                taken.add(port)
            return port


def wait_until(condition: Callable[[], Any], *, seconds: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(0.1)


@dataclass
class SlurmCluster:
    """A Slurm controller and its nodes, started and stopped by the tests."""

    root: Path
    nodes: tuple[str, ...] = ("n1", "n2")
    # Each partition and its nodes, in slurm.conf's order (the first is the default partition);
    # none: one partition `gpu` of every node.
    partitions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    gpus_per_node: int = 2
    cpus: int = 4
    memory_mib: int = 4000
    # slurm.conf settings that replace the defaults below (or add to them), e.g. {"MaxJobCount": "50000"}.
    overrides: dict[str, str] = field(default_factory=dict)
    # How long every slurmd may take to register (a few hundred on one machine take a while).
    start_seconds: float = 30.0
    controller: subprocess.Popen[bytes] | None = None
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def environment(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, check: bool = True, timeout: float = COMMAND_SECONDS) -> str:
        done = subprocess.run(
            list(argv), env=self.environment(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
        return done.stdout

    def write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        devices = self.root / "dev"
        devices.mkdir(exist_ok=True)
        for index in range(self.gpus_per_node):
            device = devices / f"gpu{index}"
            if not device.exists():
                os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, as /dev/null
        for directory in ("state", "spool", "log"):
            (self.root / directory).mkdir(exist_ok=True)
        for name in self.nodes:
            (self.root / "spool" / name).mkdir(exist_ok=True)
        # Every daemon's port differs: 256 ports drawn from 12,000 without this repeat some nine
        # times in ten, and a slurmd whose port another took never binds it, while slurmctld
        # sends that node's jobs to the other one, which runs them and reports their end "from
        # the wrong node": they stay RUNNING for ever (7 such nodes in the 256-node drains of
        # 2026-11-28, slurm.conf holding 7 ports twice).
        ports: set[int] = set()
        lines = [
            "ClusterName=gqctest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={free_port(ports)}",
            "AuthType=auth/none",
            "CredType=cred/none",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root}/state",
            f"SlurmdSpoolDir={self.root}/spool/%n",
            f"SlurmctldPidFile={self.root}/slurmctld.pid",
            f"SlurmdPidFile={self.root}/slurmd.%n.pid",
            f"SlurmctldLogFile={self.root}/log/slurmctld.log",
            f"SlurmdLogFile={self.root}/log/slurmd.%n.log",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "GresTypes=gpu",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin",
            "ReturnToService=2",
            # Generous: a loaded 2-core machine must not make a slurmd look dead.
            "SlurmdTimeout=300",
            "MessageTimeout=10",
            "KillWait=2",
            "MinJobAge=300",
            "DefMemPerCPU=100",
        ]
        unchanged = [line for line in lines if line.split("=", 1)[0] not in self.overrides]
        lines = unchanged + [f"{key}={value}" for key, value in self.overrides.items()]
        for name in self.nodes:
            lines.append(
                f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={free_port(ports)} CPUs={self.cpus} "
                f"RealMemory={self.memory_mib} Gres=gpu:fake:{self.gpus_per_node} State=UNKNOWN"
            )
        for position, (partition, members) in enumerate(self.partitions or (("gpu", self.nodes),)):
            default = "YES" if position == 0 else "NO"
            lines.append(
                f"PartitionName={partition} Nodes={','.join(members)} Default={default} MaxTime=INFINITE State=UP"
            )
        self.conf.write_text("\n".join(lines) + "\n")
        (self.root / "gres.conf").write_text(
            f"NodeName={','.join(self.nodes)} Name=gpu Type=fake File={devices}/gpu[0-{self.gpus_per_node - 1}]\n"
        )

    def _spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        with open(self.root / "log" / "daemons.err", "ab") as errors:  # the child keeps its own copy
            return subprocess.Popen(
                list(argv),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                start_new_session=True,
            )

    def start_controller(self, *, fresh: bool) -> None:
        argv = ["slurmctld", "-D", "-f", str(self.conf)]
        self.controller = self._spawn(*argv, *(["-i"] if fresh else []))
        wait_until(self.answers, what="slurmctld answers")

    def answers(self) -> bool:
        text = self.command("sinfo", "--json", check=False)
        return bool(text) and not json.loads(text).get("errors")

    def stop_controller(self) -> None:
        if self.controller is not None:
            _stop(self.controller)
            self.controller = None

    def start(self) -> None:
        """Up with every node idle; on fresh ports again if a port was taken meanwhile (twice more)."""
        for attempt in range(3):
            self.write_config()
            try:
                self.start_controller(fresh=True)
                for name in self.nodes:
                    self.daemons[name] = self._spawn("slurmd", "-D", "-N", name, "-f", str(self.conf))
                wait_until(
                    lambda: all(n["state"] == "idle" for n in self.sinfo()),
                    seconds=self.start_seconds,
                    what="every slurmd registered idle",
                )
                return
            except AssertionError:
                self.close()
                self.daemons.clear()
                if attempt == 2:
                    raise

    def sinfo(self) -> list[dict[str, Any]]:
        text = self.command("sinfo", "--json", check=False)
        nodes: list[dict[str, Any]] = json.loads(text)["nodes"] if text else []
        return nodes

    def command_json(self, *argv: str) -> dict[str, Any]:
        """A client command's `--json` answer."""
        answer: dict[str, Any] = json.loads(self.command(*argv, "--json"))
        return answer

    def live_jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = json.loads(self.command("squeue", "--json"))["jobs"]
        return [job for job in jobs if job["job_state"] not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")]

    def reset(self) -> None:
        """No live job and every node resumed: where each test starts."""
        if self.live_jobs():
            # SIGKILL at once rather than scancel's SIGTERM and KillWait: nothing here needs a grace.
            self.command("scancel", "--user=root", "--full", "--signal=KILL", check=False)
            self.command("scancel", "--user=root", check=False)
            wait_until(lambda: not self.live_jobs(), seconds=30, what="the last test's Slurm jobs gone")
        for node in self.sinfo():
            if node["state"] != "idle" or node["state_flags"]:
                self.command("scontrol", "update", f"nodename={node['name']}", "state=resume", check=False)
        wait_until(lambda: all(n["state"] == "idle" and not n["state_flags"] for n in self.sinfo()), what="nodes idle")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.controller is not None and self.live_jobs():
                self.command("scancel", "--user=root", "--full", "--signal=KILL", check=False)
                self.command("scancel", "--user=root", check=False)
                wait_until(lambda: not self.live_jobs(), seconds=15, what="jobs gone at the end")
        for process in self.daemons.values():
            _stop(process)
        self.stop_controller()


def job_label(job: dict[str, Any]) -> str:
    """Slurm's id of one `squeue --json` job as the console records it: `12_3` for task 3 of
    array 12 (a started task has a job id of its own too), `12` for a job of its own."""
    if job.get("array_task_id") is not None and job.get("array_job_id"):
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return str(job["job_id"])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    # A slurmd that stops before its jobs leaves their slurmstepd (and the jobs) running in its
    # session, orphaned for ever: 146 of them after a drain benchmark part failed (2026-11-28).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
