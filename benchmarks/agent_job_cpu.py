"""What one node agent costs in CPU per job and per beat (issue 25, the drain through agents).

    nice -n 5 .venv/bin/python benchmarks/agent_job_cpu.py [--jobs 2000] [--gpus 8] [--rounds 2]

One real agent process (`python -m gqc.agent --fake-gpus N`, its state directory, its job
wrappers and their `sh -c` processes) against a stand-in for the console's two agent endpoints
in this process (the standard library's HTTP server, on 127.0.0.1): registration answers as an
older console does (no identity), and each heartbeat frees the GPUs of the processes it reports
exited and answers starts of `true` for every free GPU, as the drain's held beat does, until
--jobs have run. The console is not under test here, so it does no work of its own: what the
agent spends is all that is left to measure. Two phases per round:

- idle: the agent beats with nothing to run for --idle seconds (heartbeat 2 s): its CPU per
  second and per beat;
- drain: --jobs jobs of `true`: the agent's CPU per job, its own and its reaped children's (the
  wrappers and their shells), and the beats it took.

Reports each round and the resident memory of the agent at the end. The drain benchmark
(benchmarks/slurm_drain.py --parts c) measures the same agents beside a real console.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]


class StandIn:
    """The console's side of one node: which replica holds which GPU, and how many are left to run."""

    def __init__(self, gpus: int, heartbeat: float) -> None:
        self.gpus = gpus
        self.heartbeat = heartbeat
        self.pace: dict[str, float] = {"heartbeat_seconds": heartbeat}  # in every answer
        self.lock = threading.Lock()
        self.holding: dict[int, int] = {}  # replica -> GPU index
        self.next_replica = 1
        self.left = 0
        self.ended = 0
        self.beats = 0
        self.all_ended = threading.Event()

    def give(self, jobs: int) -> None:
        with self.lock:
            self.left, self.ended = jobs, 0
            self.all_ended.clear()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.beats += 1
            for process in body.get("processes", []):
                if process.get("state") == "exited" and self.holding.pop(int(process["replica"]), None) is not None:
                    self.ended += 1
            if self.left == 0 and not self.holding:
                self.all_ended.set()
            starts = []
            free = sorted(set(range(self.gpus)) - set(self.holding.values()))
            for gpu in free[: self.left]:
                replica = self.next_replica
                self.next_replica += 1
                self.holding[replica] = gpu
                self.left -= 1
                starts.append(
                    {
                        "replica": replica,
                        "job": replica,
                        "command": "true",
                        "environment": {"JOB": str(replica)},
                        "gpus": [gpu],
                        "fraction": 1.0,
                    }
                )
            return {"starts": starts, "stops": [], **self.pace}


def serve(stand_in: StandIn) -> ThreadingHTTPServer:
    class Endpoint(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the console's server does

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path.endswith("/register/"):
                answer: dict[str, Any] = {**stand_in.pace, "mismatch": []}
            else:
                answer = stand_in.answer(body)
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # the agent SIGKILLed at the end resets its connection: not news

    server = Server(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


_PROFILED = """
import cProfile, runpy, sys, time
stats, sys.argv = sys.argv[1], ["gqc.agent", *sys.argv[2:]]
profile = cProfile.Profile(time.process_time)
try:
    profile.runcall(runpy.run_module, "gqc.agent", run_name="__main__")
except SystemExit:
    pass
finally:
    profile.dump_stats(stats)
"""


def cpu_seconds(process: psutil.Process) -> float:
    """The agent's own CPU to the nanosecond (schedstat: one thread, the agent's only one) and its
    reaped children's (in clock ticks: an idle beat's millisecond is under one tick)."""
    return sum(cpu_split(process))


def cpu_split(process: psutil.Process) -> tuple[float, float]:
    """cpu_seconds' two parts: the agent's own, and its reaped children's (the job wrappers)."""
    times = process.cpu_times()
    own = int(Path(f"/proc/{process.pid}/schedstat").read_text().split()[0]) / 1e9
    return own, float(times.children_user + times.children_system)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of beats with nothing to run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--samples-seconds", type=float, default=5.0, help="the answers' samples_seconds (0: left out, as before)"
    )
    parser.add_argument("--profile", type=Path, default=None, help="run the agent under cProfile, its stats here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from gqc.agent import command_line

    stand_in = StandIn(args.gpus, heartbeat=2.0)
    if args.samples_seconds > 0:  # as the console answers (its TELEMETRY_SAMPLE_SECONDS); 0: an older one, silent
        stand_in.pace["samples_seconds"] = args.samples_seconds
    server = serve(stand_in)
    scratch = Path(tempfile.mkdtemp(prefix="agent-job-cpu-"))
    token = scratch / "token"
    token.write_text("stand-in")
    argv = command_line(
        server=f"http://127.0.0.1:{server.server_address[1]}",
        node="n1",
        token_file=token,
        state_dir=scratch / "state",
        fake_gpus=args.gpus,
    )
    if args.profile is not None:  # the agent's module under cProfile, timed in CPU seconds, not wall
        argv = [argv[0], "-c", _PROFILED, str(args.profile), *argv[3:]]
    with open(scratch / "agent.log", "ab") as log:
        agent = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    watched = psutil.Process(agent.pid)
    try:
        while stand_in.beats == 0:
            time.sleep(0.1)
        print(f"load {os.getloadavg()[0]:.2f}, agent at start {watched.memory_info().rss / 2**20:.1f} MiB resident")
        for round_number in range(1, args.rounds + 1):
            beats, cpu, began = stand_in.beats, cpu_seconds(watched), time.monotonic()
            time.sleep(args.idle)
            idle_cpu, idle_beats, idle_wall = (
                cpu_seconds(watched) - cpu,
                stand_in.beats - beats,
                time.monotonic() - began,
            )
            beats, (own, children), began = stand_in.beats, cpu_split(watched), time.monotonic()
            stand_in.give(args.jobs)
            stand_in.all_ended.wait()
            wall = time.monotonic() - began
            own_after, children_after = cpu_split(watched)
            own, children = own_after - own, children_after - children
            spent, drain_beats = own + children, stand_in.beats - beats
            print(
                f"round {round_number}: idle {idle_cpu / idle_wall * 1000:.2f} ms a second, "
                f"{idle_cpu / max(1, idle_beats) * 1000:.2f} ms a beat ({idle_beats} beats); "
                f"drain of {args.jobs} jobs in {wall:.1f} s: {spent * 1000 / args.jobs:.2f} ms of CPU a job "
                f"(the agent {own * 1000 / args.jobs:.2f}, its children {children * 1000 / args.jobs:.2f}), "
                f"{drain_beats} beats ({spent * 1000 / max(1, drain_beats):.2f} ms a beat); "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
        print(f"agent at the end {watched.memory_info().rss / 2**20:.1f} MiB resident")
    finally:
        agent.send_signal(signal.SIGTERM)  # the agent stops its loop (and cProfile writes its stats)
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
