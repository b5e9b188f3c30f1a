"""The node agent on a real GPU host (issue 13): NVML registration, a job's own device, utilisation.

    python3 benchmarks/agent_gpu_check.py --report gpu-check.md                  # on a GPU host
    python3 benchmarks/agent_gpu_check.py --local-agent --report gpu-check.md    # bin/run's agent
    .venv/bin/python benchmarks/agent_gpu_check.py --fake-gpus 1 --report x.md   # anywhere, stand-ins

A whole console starts as `bin/run` would (web, worker, beat, embedded Redis) on a scratch SQLite
file, without the demo, with AGENT_HEARTBEAT_SECONDS = 1. This process then writes through the
services an agent node `local` with the GPUs the host has (count and model from NVML, so that the
registration matches), a quota and a workspace over it, and a platform admin whose token submits
the jobs through the API. A real agent (`python -m gqc.agent`, on NVML unless --fake-gpus)
registers and runs four jobs as real processes. With --local-agent the agent is the one the
launcher itself starts for CONSOLE_LOCAL_AGENT=1 (CONSOLE_LOCAL_AGENT_GPUS=nvml, or the
stand-ins' number), on the node it made, and the console runs without a memory cap (CUDA's
address space is far above any cap that would still catch a runaway). The jobs:

1. `which-device` prints its CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, then `nvidia-smi -L`:
   the index must be the one the scheduler placed it on, and nvidia-smi's UUID for it the one
   the agent registered (nvidia-smi reads NVML and lists the host's GPUs whatever
   CUDA_VISIBLE_DEVICES says; a CUDA program is what the variable restricts).
2. `compute`, a PyTorch program, prints what CUDA shows it (device count, name, UUID) and
   multiplies bf16 matrices for --compute-seconds: it must see exactly its assigned device, and
   the GPU samples the console stored from the agent's beats must rise above the idle ones
   while it runs, attributed to the job.
3. `half`, a job of 0.5 GPU: it reads GPU_QUOTA_FRACTION and GPU_QUOTA_MEMORY_MIB, sets
   PyTorch's per-process memory fraction from them, allocates within it, and tries beyond it:
   PyTorch refuses the second allocation (the fraction is advice that the program applies).
4. `cancelled`, job 2's program for ten minutes, cancelled through the API once it computes: the
   agent's SIGTERM ends it, and the job is cancelled with its device free within its 5 s grace.

Without CUDA through PyTorch (the stand-in run), jobs 2 and 3 say so and the checks that need
CUDA are skipped. Exit 0 when every check holds; the report (markdown) says what ran and what was seen.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_process import running_console
from gqc import __version__
from gqc.agent import FakeGpus, Gpus, NvmlGpus, command_line

# The node bin/run gives its local agent; this script's own agent takes the same name.
NODE = "local"
WORKSPACE = "gpu-check"
QUOTA = "gpu-team"
HEARTBEAT_SECONDS = 1.0

WHICH_DEVICE = 'echo "visible=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER"; {nvidia_smi}; sleep 3'

# The job's own Python: the host's, with its PyTorch, and none of the console's packages
# (PYTHONPATH is the agent's, and the agent's environment is the job's). Both programs start by
# finding out whether PyTorch has CUDA here; without it they say "cuda=absent".
CUDA_OR_NOT = textwrap.dedent(
    """
    import os, sys, time
    try:
        import torch
        usable = torch.cuda.is_available()
    except ImportError:
        usable = False
    """
)

COMPUTE = CUDA_OR_NOT + textwrap.dedent(
    """
    seconds = float(sys.argv[1])
    if not usable:
        print("cuda=absent", flush=True)
        time.sleep(seconds)  # holds its stand-in device busy for as long
        sys.exit(0)
    properties = torch.cuda.get_device_properties(0)
    print(f"cuda_count={torch.cuda.device_count()} name={properties.name} uuid={properties.uuid}", flush=True)
    left = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    right = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    products, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(50):
            left @ right
        torch.cuda.synchronize()
        products += 50
    elapsed = time.monotonic() - started
    print(f"products={products} tflops={products * 2 * 8192**3 / elapsed / 1e12:.0f}", flush=True)
    """
)

HALF = CUDA_OR_NOT + textwrap.dedent(
    """
    fraction = float(os.environ["GPU_QUOTA_FRACTION"])
    allowed_mib = int(os.environ["GPU_QUOTA_MEMORY_MIB"])
    print(f"fraction={fraction} memory_mib={allowed_mib}", flush=True)
    if not usable:
        print("cuda=absent", flush=True)
        sys.exit(0)
    torch.cuda.set_per_process_memory_fraction(fraction)
    within = torch.empty(int(allowed_mib * 0.8) * 2**20, dtype=torch.uint8, device="cuda")
    print(f"within_mib={within.numel() // 2**20} allocated", flush=True)
    try:
        beyond = torch.empty(int(allowed_mib * 0.5) * 2**20, dtype=torch.uint8, device="cuda")
        print(f"beyond_mib={beyond.numel() // 2**20} allocated", flush=True)
    except torch.OutOfMemoryError:
        print(f"beyond_mib={int(allowed_mib * 0.5)} refused", flush=True)
    """
)


RESULT = {True: "ok", False: "FAILED", None: "skipped"}


@dataclass
class Check:
    name: str
    passed: bool | None  # None: skipped
    seen: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    sections: list[tuple[str, str]] = field(default_factory=list)

    def check(self, name: str, passed: bool | None, seen: str) -> None:
        self.checks.append(Check(name, passed, seen))
        print(f"{RESULT[passed]:8} {name}: {seen}", flush=True)

    def section(self, title: str, body: str) -> None:
        self.sections.append((title, body))

    def ok(self) -> bool:
        return all(check.passed is not False for check in self.checks)

    def markdown(self) -> str:
        lines = ["| check | result | seen |", "| --- | --- | --- |"]
        for check in self.checks:
            seen = " ".join(check.seen.replace("|", "/").split())
            lines.append(f"| {check.name} | {RESULT[check.passed]} | {seen} |")
        for title, body in self.sections:
            lines += ["", f"### {title}", "", "```", body.rstrip(), "```"]
        return "\n".join(lines) + "\n"


def wait_for(condition: Callable[[], Any], *, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"not within {seconds:.0f} s: {what}")


def uuid_key(uuid: str) -> str:
    """NVML says GPU-8f2e…, PyTorch 8f2e…: the same device."""
    return uuid.lower().removeprefix("gpu-")


def setup_world(devices: list[dict[str, Any]], *, own_node: bool) -> tuple[str, str]:
    """The agent node (unless the launcher made it, for its local agent), its quota and
    workspace, and a platform admin; (node token, or "" without own_node; user token)."""
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Django's logging setup lets a line per request through
    from console.services import create_user, issue_token
    from quotas import services as quota_services
    from quotas.node_agents import issue_node_token
    from workspaces import services as workspace_services

    node_token = ""
    if own_node:
        node = quota_services.create_node(
            actor=None, name=NODE, gpus=len(devices), executor="agent", gpu_model=devices[0]["model"]
        )
        node_token = issue_node_token(actor=None, node=node)
    quota = quota_services.create_quota(actor=None, name=QUOTA, gpus=len(devices))
    workspace_services.create_workspace(actor=None, name=WORKSPACE, quotas=[quota])
    admin = create_user(actor=None, username="gpu-check", password="gpu-check-password", is_platform_admin=True)
    return node_token, issue_token(user=admin).key


class Api:
    """The console's API as the platform admin uses it."""

    def __init__(self, url: str, token: str) -> None:
        self.client = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Token {token}"}, timeout=10)

    def submit(self, name: str, *, gpus: float, command: str) -> int:
        answer = self.client.post(
            "/jobs/",
            json={
                "name": name,
                "workspace": WORKSPACE,
                "quota": QUOTA,
                "kind": "training",
                "gpus": gpus,
                "command": command,
                "grace_seconds": 5,
                "requeue": False,
            },
        )
        answer.raise_for_status()
        return int(answer.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        answer = self.client.get(f"/jobs/{job_id}/")
        answer.raise_for_status()
        job: dict[str, Any] = answer.json()
        return job

    def logs(self, job_id: int) -> list[str]:
        answer = self.client.get(f"/jobs/{job_id}/logs/")
        answer.raise_for_status()
        return [str(line) for line in answer.json()["lines"]]

    def events(self, job_id: int) -> list[str]:
        answer = self.client.get(f"/jobs/{job_id}/events/")
        answer.raise_for_status()
        body = answer.json()
        rows = body["results"] if isinstance(body, dict) else body
        return [f"{row['kind']}: {row['message']}" for row in rows]

    def cancel(self, job_id: int) -> None:
        self.client.post(f"/jobs/{job_id}/cancel/", json={}).raise_for_status()

    def ended(self, job_id: int, *, seconds: float) -> str:
        state: str = wait_for(
            lambda: (s := self.job(job_id)["state"]) in {"succeeded", "failed", "cancelled"} and s,
            seconds=seconds,
            what=f"job {job_id} ended",
        )
        return state


def placed_devices(job_id: int) -> list[int]:
    from scheduling.models import Job

    return [int(i) for placement in Job.objects.get(pk=job_id).placements.all() for i in placement.devices]


def registered_devices() -> list[dict[str, Any]]:
    from quotas.models import NodeAgent

    return list(NodeAgent.objects.get(node__name=NODE).registered_devices)


def samples_between(start: datetime, end: datetime) -> list[tuple[datetime, int, float, int | None]]:
    from telemetry.models import GpuSample, Resolution

    rows = GpuSample.objects.filter(node__name=NODE, resolution=Resolution.RAW, at__gte=start, at__lte=end)
    return list(rows.order_by("at", "gpu").values_list("at", "gpu", "utilisation", "job_id"))


@contextlib.contextmanager
def running_agent(url: str, scratch: Path, node_token: str, fake_gpus: int | None) -> Iterator[None]:
    """`python -m gqc.agent` for NODE, stopped (SIGTERM, as a host's service manager would) before
    the console it talks to."""
    token_file = scratch / "node.token"
    token_file.write_text(node_token)
    command = command_line(
        server=url, node=NODE, token_file=token_file, state_dir=scratch / "state", fake_gpus=fake_gpus
    )
    with (scratch / "agent.log").open("ab") as log:
        agent = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        agent.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=10)


def check_registration(report: Report, devices: list[dict[str, Any]]) -> None:
    from quotas.models import Node, NodeAgent

    registered = wait_for(registered_devices, seconds=60, what="the agent registered")
    node = Node.objects.get(name=NODE)
    report.check(
        "registration matches NVML",
        [(d["index"], d["uuid"], d["model"]) for d in registered]
        == [(d["index"], d["uuid"], d["model"]) for d in devices],
        "; ".join(f"{d['index']}: {d['model']} {d['uuid']} {d['memory_mib']} MiB" for d in registered),
    )
    report.check("node ready, not cordoned", node.state == "ready", f"state {node.state}")
    version = NodeAgent.objects.get(node=node).version
    report.check("the agent's version is recorded", version == __version__, f"agent {version}")


def check_which_device(report: Report, api: Api, nvidia_smi: bool) -> None:
    job = api.submit(
        "which-device", gpus=1, command=WHICH_DEVICE.format(nvidia_smi="nvidia-smi -L" if nvidia_smi else "true")
    )
    placed = wait_for(lambda: placed_devices(job), seconds=60, what="which-device placed")
    state = api.ended(job, seconds=60)
    lines = api.logs(job)
    report.section("which-device: its log", "\n".join(lines))
    report.check("which-device succeeded", state == "succeeded", state)
    expected = f"visible={','.join(map(str, placed))} order=PCI_BUS_ID"
    report.check(
        "CUDA_VISIBLE_DEVICES is the placed device", bool(lines) and lines[0] == expected, lines[0] if lines else ""
    )
    if not nvidia_smi:
        report.check("nvidia-smi names the registered UUID", None, "no nvidia-smi on this host")
        return
    uuids = {d["index"]: d["uuid"] for d in registered_devices()}
    wanted = [uuids[index] for index in placed]
    report.check(
        "nvidia-smi names the registered UUID",
        all(any(uuid in line for line in lines[1:]) for uuid in wanted),
        f"placed {placed}, registered {wanted}",
    )


def check_compute(report: Report, api: Api, scratch: Path, seconds: float) -> None:
    program = scratch / "compute.py"
    program.write_text(COMPUTE)
    idle_from = datetime.now(UTC)
    time.sleep(3 * HEARTBEAT_SECONDS)
    job = api.submit("compute", gpus=1, command=f"env -u PYTHONPATH {sys.executable} {program} {seconds:g}")
    placed = wait_for(lambda: placed_devices(job), seconds=60, what="compute placed")
    started_at = datetime.now(UTC)
    state = api.ended(job, seconds=seconds + 120)
    ended_at = datetime.now(UTC)
    time.sleep(2 * HEARTBEAT_SECONDS)  # the last beat's samples, written within AGENT_SAMPLES_FLUSH_SECONDS
    lines = api.logs(job)
    report.section("compute: its log", "\n".join(lines))
    report.check("compute succeeded", state == "succeeded", f"{state}; events: {' / '.join(api.events(job))}")
    samples = samples_between(idle_from, datetime.now(UTC))
    report.section(
        "GPU samples the console stored (time, device, utilisation %, job)",
        "\n".join(f"{at:%H:%M:%S.%f} gpu {gpu} {util:5.1f}% job {job_id}" for at, gpu, util, job_id in samples),
    )
    if any(line == "cuda=absent" for line in lines):
        report.check("CUDA shows exactly the assigned device", None, "no CUDA through PyTorch on this host")
    else:
        uuids = {d["index"]: uuid_key(d["uuid"]) for d in registered_devices()}
        seen = next((line for line in lines if line.startswith("cuda_count=")), "")
        fields = dict(part.split("=", 1) for part in seen.split() if "=" in part)
        report.check(
            "CUDA shows exactly the assigned device",
            fields.get("cuda_count") == str(len(placed)) and uuid_key(fields.get("uuid", "")) == uuids[placed[0]],
            f"placed {placed} ({uuids[placed[0]]}); the program saw {seen}",
        )
    idle = [util for at, gpu, util, _ in samples if at < started_at and gpu in placed]
    busy = [
        util for at, gpu, util, job_id in samples if started_at <= at <= ended_at and gpu in placed and job_id == job
    ]
    report.check(
        "utilisation rises while it computes",
        bool(idle) and bool(busy) and max(busy) >= 50 and max(busy) > max(idle) + 20,
        f"idle max {max(idle, default=float('nan')):.0f}% ({len(idle)} samples), "
        f"busy max {max(busy, default=float('nan')):.0f}% ({len(busy)} samples, attributed to the job)",
    )


def check_cancel(report: Report, api: Api, scratch: Path) -> None:
    """A stop on a real CUDA process: SIGTERM, and the device free once the process is gone."""
    program = scratch / "compute.py"
    job = api.submit("cancelled", gpus=1, command=f"env -u PYTHONPATH {sys.executable} {program} 600")
    wait_for(lambda: api.logs(job), seconds=120, what="cancelled's program running")
    time.sleep(2 * HEARTBEAT_SECONDS)
    asked = time.monotonic()
    api.cancel(job)
    state = api.ended(job, seconds=60)
    freed_after = time.monotonic() - asked
    lines = api.logs(job)
    report.check(
        "a cancel stops the CUDA process within its grace",
        state == "cancelled" and freed_after <= 5 + 3 * HEARTBEAT_SECONDS and not placed_devices(job),
        f"{state} {freed_after:.1f} s after the cancel (grace 5 s); devices held after: {placed_devices(job)}; "
        f"its log: {' / '.join(lines)}",
    )


def check_half(report: Report, api: Api, scratch: Path, devices: list[dict[str, Any]]) -> None:
    program = scratch / "half.py"
    program.write_text(HALF)
    job = api.submit("half", gpus=0.5, command=f"env -u PYTHONPATH {sys.executable} {program}")
    state = api.ended(job, seconds=120)
    lines = api.logs(job)
    report.section("half: its log", "\n".join(lines))
    report.check("half succeeded", state == "succeeded", f"{state}; events: {' / '.join(api.events(job))}")
    expected = f"fraction=0.5 memory_mib={int(devices[0]['memory_mib'] * 0.5)}"
    report.check(
        "the fraction reaches the environment", bool(lines) and lines[0] == expected, lines[0] if lines else ""
    )
    if "cuda=absent" in lines:
        report.check("PyTorch refuses memory beyond the fraction", None, "no CUDA through PyTorch on this host")
    else:
        report.check(
            "PyTorch refuses memory beyond the fraction",
            any(line.endswith("refused") for line in lines) and any(line.endswith(" allocated") for line in lines),
            " / ".join(lines[1:]),
        )


def host_facts() -> str:
    facts = [f"python {sys.version.split()[0]}", f"date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"]
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,uuid,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        facts.append(f"nvidia-smi: {smi.stdout.strip() or smi.stderr.strip()}")
    return "\n".join(facts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fake-gpus", type=int, default=None, help="N stand-in GPUs instead of NVML")
    parser.add_argument("--compute-seconds", type=float, default=20.0)
    parser.add_argument(
        "--local-agent",
        action="store_true",
        help="check the agent bin/run starts (CONSOLE_LOCAL_AGENT=1, its GPUs nvml or --fake-gpus), not one of its own",
    )
    parser.add_argument("--port", type=int, default=8140)
    parser.add_argument("--report", type=Path, default=Path("gpu-check.md"))
    parser.add_argument("--logs", type=Path, default=None, help="a folder for the console's and the agent's logs")
    arguments = parser.parse_args()

    gpus: Gpus = FakeGpus(arguments.fake_gpus, NODE) if arguments.fake_gpus is not None else NvmlGpus()
    devices = gpus.devices()
    report = Report()
    report.section("host", host_facts())
    os.environ.update(
        {
            "CONSOLE_DEMO": "0",
            "AGENT_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
            # Readings in every beat, as before samples_seconds: the idle and busy windows are seconds long.
            "TELEMETRY_SAMPLE_SECONDS": str(HEARTBEAT_SECONDS),
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "CONSOLE_LOCAL_AGENT": "1" if arguments.local_agent else "0",
            "CONSOLE_LOCAL_AGENT_GPUS": "nvml" if arguments.fake_gpus is None else str(arguments.fake_gpus),
        }
    )
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    agent_log = scratch / "agent.log"
    console_log = Path(tempfile.gettempdir()) / f"console-run-{arguments.port}.log"
    try:
        # The local agent is the launcher's child, and its jobs the agent's: under a cap, CUDA would not start.
        cap = None if arguments.local_agent else 3_000_000_000
        with running_console(port=arguments.port, memory_cap_bytes=cap) as console:
            os.environ["DATABASE_URL"] = console.database_url
            # The services' live messages go to the console's own Redis, the embedded one.
            embedded = re.search(r"embedded Redis at (\S+)", console.log())
            if embedded is not None:
                os.environ["REDIS_URL"] = embedded.group(1)
            node_token, user_token = setup_world(devices, own_node=not arguments.local_agent)
            agent = (
                contextlib.nullcontext()
                if arguments.local_agent
                else running_agent(console.url, scratch, node_token, arguments.fake_gpus)
            )
            with agent:
                api = Api(console.url, user_token)
                check_registration(report, devices)
                nvidia_smi = arguments.fake_gpus is None and bool(shutil.which("nvidia-smi"))
                check_which_device(report, api, nvidia_smi=nvidia_smi)
                check_compute(report, api, scratch, arguments.compute_seconds)
                check_half(report, api, scratch, devices)
                check_cancel(report, api, scratch)
    except (TimeoutError, httpx.HTTPError, RuntimeError) as error:
        report.check("the run finished", False, str(error))
    finally:
        if agent_log.exists():
            report.section(
                "agent log (last 40 lines)", "\n".join(agent_log.read_text(errors="replace").splitlines()[-40:])
            )
        if arguments.logs is not None:
            arguments.logs.mkdir(parents=True, exist_ok=True)
            for kept in (agent_log, console_log):
                if kept.exists():
                    shutil.copy(kept, arguments.logs / kept.name)
        shutil.rmtree(scratch, ignore_errors=True)
    arguments.report.write_text(report.markdown())
    print(f"report: {arguments.report}", flush=True)
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
