"""Slurm's client commands, each bounded in time, and what their answers mean to the console.

Plain Python (no Django): `sinfo --json` reads the nodes, a plain-text `squeue` the jobs,
`scontrol show job -d` the per-node devices of a job, `sbatch` submits, `scancel` signals and
cancels. Every call has a timeout; a command that does not answer, cannot be run, or answers
something unreadable raises `SlurmUnavailable` with one sentence, which the executor turns into
node states and a log line, never a traceback.

Why squeue's text and not its `--json`: in Slurm 22.05 `squeue --json` ignores `--states`,
`--name` and `--jobs` and answers every job slurmctld still remembers (MinJobAge), about 3.7 KB
of JSON each: with the thousands of short jobs a drain ends in five minutes, every read of the
cluster grew to megabytes. The text answer is one short line a job. It has no bound GPU indices;
the console's own jobs write theirs beside their output (`devices_file`), and a job outside the
console is asked once (`held_gpus`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm.arrays import ArrayTask, array_indices, array_script

# Slurm's base node states that leave a node out of use, and the flags that drain it.
_DOWN_STATES = frozenset({"down", "fail", "future", "unknown", "invalid"})
_DOWN_FLAGS = frozenset({"NOT_RESPONDING", "FAIL", "POWERED_DOWN", "POWER_DOWN", "INVALID_REG", "REBOOT_ISSUED"})
_DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})
# squeue's job states of a job that still holds (or is about to hold) its node.
LIVE_JOB_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)
# What of the console's own environment a job gets (through sbatch's --export=ALL).
_SUBMIT_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"})
_GRES_GPU = re.compile(r"^gpu(?::(?P<model>[^:(]+))?:(?P<count>\d+)")
_GRES_INDICES = re.compile(r"IDX:(?P<indices>[0-9,\-]+)")
# squeue's columns, each ended by "|" (an empty width: never cut). The name is last: it is the
# only one that may hold a "|".
_SQUEUE_FORMAT = "JobID:|,State:|,exit_code:|,NodeList:|,tres-per-node:|,Reason:|,ArrayJobID:|,ArrayTaskID:|,Name:|"
_SQUEUE_COLUMNS = 9
# `scontrol -d -o show job`'s per-node allocation: "Nodes=n[1-2] CPU_IDs=0 Mem=100 GRES=gpu:fake:1(IDX:0)".
_NODE_ALLOCATION = re.compile(r"(?:^|\s)Nodes=(?P<nodes>\S+) CPU_IDs=\S* Mem=\S* GRES=(?P<gres>\S*)")
_HOST_RANGE = re.compile(r"(?P<prefix>[^,\[]*)\[(?P<ranges>[^\]]*)\](?P<suffix>[^,]*)")


class SlurmUnavailable(Exception):
    """A Slurm command did not answer in time, failed, or said something unreadable (the message says which)."""


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    gpus: int
    gpu_model: str
    cpus: int
    memory_mib: int
    partition: str
    # "up", "drain" or "down": what the console's node state follows.
    availability: str
    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class SlurmJob:
    slurm_id: int
    name: str
    comment: str
    state: str
    reason: str
    nodes: str
    # The process's exit status as wait() gives it: code << 8, or the signal number.
    exit_status: int
    gpu_indices: tuple[int, ...]
    gpus: int
    # Each node's GPU indices (scontrol show job -d's per-node GRES=…(IDX:…)): a job over several
    # nodes holds a share of each. The console's own jobs are on one node.
    held: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # The job array this job is a task of, and its task id (None: not an array's). A pending
    # task has the array's job id; a started one its own (squeue --array lists each task).
    array_id: int = 0
    array_task: int | None = None

    @property
    def key(self) -> tuple[int, int | None]:
        """What names this job for as long as slurmctld knows it: (array id, task), or (its id, None)."""
        return (self.array_id or self.slurm_id, self.array_task)

    @property
    def label(self) -> str:
        """Its id as squeue shows it and scancel takes it (`12_3` for an array's task)."""
        return f"{self.key[0]}_{self.array_task}" if self.array_task is not None else str(self.slurm_id)

    @property
    def live(self) -> bool:
        return self.state in LIVE_JOB_STATES

    @property
    def exit_code(self) -> int:
        """The code a shell would report: the exit code, or 128 + the signal that ended it."""
        signal = self.exit_status & 0x7F
        return 128 + signal if signal else (self.exit_status >> 8) & 0xFF


def gpus_of_gres(gres: str) -> tuple[int, str]:
    """GPUs and model of a GRES string such as `gpu:a100:8,nic:1` (0 and "" without GPUs)."""
    for part in (gres or "").split(","):
        found = _GRES_GPU.match(part.strip())
        if found:
            return int(found["count"]), found["model"] or ""
    return 0, ""


def indices_of_gres(details: Sequence[str]) -> tuple[int, ...]:
    """The GPU indices of `gpu:fake:2(IDX:0-1)` entries (squeue's gres_detail)."""
    indices: list[int] = []
    for detail in details:
        if not detail.startswith("gpu"):
            continue
        found = _GRES_INDICES.search(detail)
        if not found:
            continue
        for span in found["indices"].split(","):
            first, _, last = span.partition("-")
            indices.extend(range(int(first), int(last or first) + 1))
    return tuple(sorted(set(indices)))


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list (`n[1-3,7],gpu01`, `s[0001-0002]`) as names."""
    names: list[str] = []
    position = 0
    while position < len(hostlist):
        ranged = _HOST_RANGE.match(hostlist, position)
        comma = hostlist.find(",", position)
        if ranged and (comma == -1 or ranged.start("ranges") < comma):
            for span in ranged["ranges"].split(","):
                first, _, last = span.partition("-")
                width = len(first)
                for number in range(int(first), int(last or first) + 1):
                    names.append(f"{ranged['prefix']}{number:0{width}d}{ranged['suffix']}")
            position = ranged.end() + 1
        else:
            end = len(hostlist) if comma == -1 else comma
            if hostlist[position:end]:
                names.append(hostlist[position:end])
            position = end + 1
    return names


def held_of_scontrol(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each node's GPU indices in `scontrol -d -o show job ID`'s answer (its per-node lines)."""
    held: list[tuple[str, tuple[int, ...]]] = []
    for allocation in _NODE_ALLOCATION.finditer(text):
        indices = indices_of_gres([allocation["gres"]])
        if indices:
            held.extend((name, indices) for name in expand_hostlist(allocation["nodes"]))
    return tuple(held)


def job_of_squeue_line(line: str) -> SlurmJob:
    """One line of `squeue --noheader --Format=_SQUEUE_FORMAT` (no bound indices: see the module)."""
    columns = line.split("|", _SQUEUE_COLUMNS - 1)
    if len(columns) < _SQUEUE_COLUMNS or not columns[0].strip().isdigit():
        raise SlurmUnavailable(f"squeue answered an unreadable line: {line[:80]!r}")
    job_id, state, exit_status, nodes, tres, reason, array_id, array_task, name = (column.strip() for column in columns)
    gpus, _model = gpus_of_gres(tres.removeprefix("gres:"))
    return SlurmJob(
        array_id=int(array_id) if array_id.isdigit() else 0,
        # "N/A" for a job that is no array's task (and for an array's own record once it ended
        # with tasks never started: slurm.executor.follow).
        array_task=int(array_task) if array_task.isdigit() else None,
        slurm_id=int(job_id),
        name=name.removesuffix("|"),
        comment="",
        # "CANCELLED by 0" in some versions: the state is the first word.
        state=(state.split() or ["UNKNOWN"])[0].upper(),
        reason=reason,
        nodes=nodes,
        exit_status=int(exit_status) if exit_status.isdigit() else 0,
        gpu_indices=(),
        gpus=gpus,
    )


def devices_path(output: str) -> str:
    """Where a console job's script writes the GPU indices Slurm bound it to (beside its output)."""
    return f"{output}.gpus"


def read_devices_file(output: str) -> tuple[int, ...] | None:
    """The indices a job's script wrote (`SLURM_JOB_GPUS`: the node's own numbering, as in
    `scontrol show job -d`); None while it has not (no file, or its line not ended yet)."""
    try:
        with open(devices_path(output), encoding="ascii", errors="replace") as written:
            line = written.read(4096)
    except OSError:
        return None
    if not line.endswith("\n"):
        return None
    indices: list[int] = []
    for span in line.strip().split(","):
        first, _, last = span.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            indices.extend(range(int(first), int(last or first) + 1))
    return tuple(sorted(set(indices)))


def held_by_node(row: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each node's GPU indices of one squeue --json job: its `gres_detail` has one entry per node,
    in the order of `job_resources.allocated_nodes` (as `scontrol show job -d` lists them)."""
    details = [str(detail) for detail in row.get("gres_detail") or []]
    if not details:
        return ()
    resources = row.get("job_resources") or {}
    allocated = resources.get("allocated_nodes") if isinstance(resources, Mapping) else None
    names = [str(node.get("nodename") or "") for node in allocated or [] if isinstance(node, Mapping)]
    if not names and len(details) == 1:
        names = [str(row.get("nodes") or "")]
    held = []
    for name, detail in zip(names, details, strict=False):
        indices = indices_of_gres([detail])
        if name and indices:
            held.append((name, indices))
    return tuple(held)


def availability(state: str, flags: Sequence[str]) -> str:
    flag_set = {flag.upper() for flag in flags}
    if state.lower() in _DOWN_STATES or flag_set & _DOWN_FLAGS:
        return "down"
    if flag_set & _DRAIN_FLAGS:
        return "drain"
    return "up"


class SlurmClient:
    """The client commands against one cluster (`conf` is its slurm.conf), each within `timeout` seconds."""

    def __init__(self, *, conf: str, timeout: float) -> None:
        self.conf = conf
        self.timeout = timeout

    def _run(
        self, argv: Sequence[str], *, stdin: str | None = None, environment: Mapping[str, str] | None = None
    ) -> str:
        environment = {**(os.environ if environment is None else environment), "SLURM_CONF": self.conf}
        try:
            finished = subprocess.run(
                list(argv),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=environment,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"{argv[0]} did not answer within {self.timeout:g} s") from None
        except OSError as error:
            raise SlurmUnavailable(f"{argv[0]} could not be run: {error.strerror or error}") from None
        if finished.returncode != 0:
            said = " ".join((finished.stderr or finished.stdout).split())[:300]
            raise SlurmUnavailable(f"{argv[0]} failed with code {finished.returncode}: {said or 'no message'}")
        return finished.stdout

    def _json(self, argv: Sequence[str], key: str) -> list[Mapping[str, Any]]:
        text = self._run(argv)
        try:
            answer = json.loads(text)
            rows = answer[key]
        except (ValueError, KeyError, TypeError):
            raise SlurmUnavailable(f"{argv[0]} --json answered no {key!r} list") from None
        if not isinstance(rows, list):
            raise SlurmUnavailable(f"{argv[0]} --json answered no {key!r} list")
        # An unreachable slurmctld is exit code 0 with an empty list and an `errors` entry.
        errors = answer.get("errors") or []
        if errors:
            said = "; ".join(
                str(error.get("description") or error.get("error") or error) if isinstance(error, dict) else str(error)
                for error in errors[:3]
            )
            raise SlurmUnavailable(f"{argv[0]} answered an error: {said}")
        return rows

    def nodes(self) -> list[SlurmNode]:
        nodes = []
        for row in self._json(["sinfo", "--json"], "nodes"):
            gpus, model = gpus_of_gres(str(row.get("gres") or ""))
            partitions = row.get("partitions") or []
            state = str(row.get("state") or "unknown")
            flags = [str(flag) for flag in row.get("state_flags") or []]
            nodes.append(
                SlurmNode(
                    name=str(row["name"]),
                    gpus=gpus,
                    gpu_model=model,
                    cpus=int(row.get("cpus") or 0),
                    memory_mib=int(row.get("real_memory") or 0),
                    partition=str(partitions[0]) if partitions else "",
                    availability=availability(state, flags),
                    state="+".join([state.upper(), *flags]),
                    reason=str(row.get("reason") or ""),
                )
            )
        return nodes

    def jobs(self, *, ended: bool = True) -> list[SlurmJob]:
        """Every job slurmctld still knows, ended ones included (for MinJobAge seconds) unless
        `ended` is False (squeue's default states: pending, running and the like). One line a
        job, without bound GPU indices (the module says why; `held_gpus` asks for them)."""
        # --array: one line per array task, the pending ones too (not one line for them all).
        argv = ["squeue", "--array", "--noheader", f"--Format={_SQUEUE_FORMAT}", *(["--states=all"] if ended else [])]
        return [job_of_squeue_line(line) for line in self._run(argv).splitlines() if line.strip()]

    def held_gpus(self, slurm_id: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Each node's GPU indices that one job holds (`scontrol -d -o show job`); () once it
        holds none (ended, or gone from slurmctld's memory)."""
        try:
            text = self._run(["scontrol", "-d", "-o", "show", "job", str(slurm_id)])
        except SlurmUnavailable as error:
            if "invalid job id" in str(error).lower():
                return ()
            raise
        return held_of_scontrol(text)

    def submit_array(
        self,
        *,
        name: str,
        comment: str,
        node: str,
        gpus: int,
        cpus: int,
        partition: str = "",
        memory_mib: int,
        output_pattern: str,
        tasks: Mapping[int, ArrayTask],
    ) -> int:
        """Submit one job array pinned to `node`, each task id running its task; returns the array's id.

        Every task asks for the same node, GPUs, CPUs and memory (one group of a wave's replicas,
        slurm.submitting); the batch script picks a task's command and environment by
        `SLURM_ARRAY_TASK_ID`. One sbatch for the group: a sbatch per replica was one process and
        one RPC each, thousands of them at once on a drain (docs/slurm.md). `output_pattern` holds
        Slurm's `%a`, the task id: each task has its own output file (array_output).

        The job's environment is written into the script rather than passed with `--export`,
        whose list is split on commas that values may hold. sbatch itself runs with only the
        basic variables of the console's process (`_SUBMIT_VARIABLES`), which `--export=ALL`
        hands on: the console's own environment (its database URL among it) stays out of the job.
        `--export=NONE` would do that too, but makes slurmd load the user's login environment,
        about 3 s more per start on the test machine.
        """
        if not tasks:
            raise ValueError("a job array needs a task")
        argv = [
            "sbatch",
            "--parsable",
            f"--array={array_indices(tasks)}",
            f"--job-name={name}",
            f"--comment={comment}",
            f"--nodelist={node}",
            "--nodes=1",
            "--ntasks=1",
            "--export=ALL",
            f"--output={output_pattern}",
            "--open-mode=append",
        ]
        if partition:
            argv.append(f"--partition={partition}")
        if gpus:
            argv.append(f"--gres=gpu:{gpus}")
        if cpus:
            argv.append(f"--cpus-per-task={cpus}")
        if memory_mib:
            argv.append(f"--mem={memory_mib}M")
        basic = {key: value for key, value in os.environ.items() if key in _SUBMIT_VARIABLES}
        answer = self._run(argv, stdin=array_script(tasks), environment=basic).strip()
        try:
            return int(answer.split(";")[0])
        except ValueError:
            raise SlurmUnavailable(f"sbatch answered {answer[:80]!r}, not a job id") from None

    def signal(self, labels: Sequence[str], signal_name: str) -> None:
        """Send a signal to the jobs' every process (the batch shell and its children); `labels`
        as scancel takes them (`12`, or `12_3` for one task of an array)."""
        if labels:
            self._run(["scancel", "--full", f"--signal={signal_name}", *labels])

    def cancel(self, labels: Sequence[str]) -> None:
        """Cancel the jobs: Slurm sends SIGTERM, then SIGKILL after its KillWait."""
        if labels:
            self._run(["scancel", *labels])


__all__ = [
    "LIVE_JOB_STATES",
    "SlurmClient",
    "SlurmJob",
    "SlurmNode",
    "SlurmUnavailable",
    "availability",
    "devices_path",
    "expand_hostlist",
    "gpus_of_gres",
    "held_by_node",
    "held_of_scontrol",
    "indices_of_gres",
    "job_of_squeue_line",
    "read_devices_file",
]
