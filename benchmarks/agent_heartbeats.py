"""The node agent's figures (AGENT.md, issue 13): a thousand agents beating against one console.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python benchmarks/agent_heartbeats.py
    .venv/bin/python benchmarks/agent_heartbeats.py --agents 1000 --interval 5 --seconds 600

A whole console starts as `bin/run` would (web, worker, beat, Redis) on a scratch database,
without the demo, with AGENT_HEARTBEAT_SECONDS = --interval. This process then creates --agents
agent nodes of 8 GPUs, a quota tree over them and a node token each (through the services), and
drives that many simulated agents from one asyncio loop: each registers, then beats every
--interval seconds with its processes and 8 GPUs' samples, starts what it is told to start (a
process "runs" from the moment the answer arrives) and stops at once what it is told to stop,
beating again straight away as the real agent does when a process exits.

The workload: team-b's borrowing jobs (one 8-GPU job per node, grace 1 s) fill the cluster in
the first minute; from then on, every 30 s, team-a submits 8-GPU jobs of higher priority that
reclaim some of them. That gives the decision-to-start figure (admission event → the agent
received the start) and the stop-to-free one (eviction event → the requeue event written when
the agent reported the process gone).

It prints heartbeat latency (p50, p99, max) per minute, the web process's memory (RSS) per
minute, and with --ramp the most beats per second held before p99 passes 100 ms (intervals
shortened step by step, 20 s each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_process import drop_postgres, fresh_postgres, running_console

GPUS = 8


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def setup_world(agents: int) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """Agent nodes, a quota tree, a workspace and node tokens, written through the services."""
    import django

    django.setup()
    from quotas import services as quota_services
    from quotas.models import Node
    from quotas.node_agents import issue_node_token
    from workspaces import services as workspace_services

    nodes = quota_services.create_nodes(
        actor=None,
        nodes=[quota_services.NewNode(name=f"agent-{i:04d}", gpus=GPUS, executor="agent") for i in range(agents)],
    )
    total = agents * GPUS
    root = quota_services.create_quota(actor=None, name="Quota1", gpus=total)
    team_a = quota_services.create_quota(actor=None, name="team-a", parent=root, gpus=total // 2)
    team_b = quota_services.create_quota(actor=None, name="team-b", parent=root, gpus=total // 2)
    workspace = workspace_services.create_workspace(actor=None, name="bench", quotas=[root, team_a, team_b])
    tokens = [(node.name, issue_node_token(actor=None, node=node)) for node in nodes]
    Node.objects.filter(executor="agent").update(last_heartbeat=datetime.now(UTC))
    return tokens, {"workspace": workspace, "team-a": team_a, "team-b": team_b}


def submit(world: dict[str, Any], quota: str, count: int, *, priority: int, prefix: str) -> None:
    from scheduling import services
    from scheduling.models import JobKind

    services.submit_jobs(
        actor=None,
        submissions=[
            services.JobSubmission(
                name=f"{prefix}-{i}",
                kind=JobKind.TRAINING,
                gpus=GPUS,
                priority=priority,
                preemptible=True,
                grace_seconds=1,
                command="sleep 3600",
                workspace=world["workspace"],
                quota=world[quota],
            )
            for i in range(count)
        ],
    )


class Submitter:
    """Submits jobs from a process of its own (Django set up once there): the ORM in the load
    client's process stalled its event loop for as long as a submission took, and every beat in
    flight was measured that much late. Through the API instead, the submissions' own work would
    land in the web processes, beside the beats the target is about."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.asks: multiprocessing.Queue[tuple[str, int, int, str] | None] = context.Queue()
        self.done: multiprocessing.Queue[int] = context.Queue()
        self.process = context.Process(target=_submit_forever, args=(self.asks, self.done), daemon=True)
        self.process.start()

    def submit(self, quota: str, count: int, *, priority: int, prefix: str) -> int:
        self.asks.put((quota, count, priority, prefix))
        return self.done.get(timeout=300)

    def close(self) -> None:
        self.asks.put(None)
        self.process.join(timeout=30)


def _submit_forever(
    asks: multiprocessing.Queue[tuple[str, int, int, str] | None], done: multiprocessing.Queue[int]
) -> None:
    import django

    django.setup()
    from django.conf import settings

    from quotas.models import Quota
    from workspaces.models import Workspace

    settings.SCHEDULER_TRIGGER = "none"  # the console's beat runs the cycles
    settings.SCHEDULER_PUBLISH_EVENTS = False  # this process has no Channels layer of its own

    world: dict[str, Any] = {"workspace": Workspace.objects.get(name="bench")}
    while (ask := asks.get()) is not None:
        quota, count, priority, prefix = ask
        world[quota] = Quota.objects.get(name=quota)
        submit(world, quota, count, priority=priority, prefix=prefix)
        done.put(count)


class LoopLag:
    """How late this process's event loop wakes a 10 ms sleep: the load client's own stalls."""

    def __init__(self) -> None:
        self.worst = 0.0

    async def watch(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.perf_counter() - asked - 0.01)

    def take(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst


class LeanClient:
    """HTTP/1.1 POSTs over a pool of kept-alive connections, in plain asyncio.

    httpx cost the load client about as much CPU per request as the console spent on the beat
    itself, on the same two cores, so the figures measured the client as much as the server.
    This speaks just what the benchmark needs: a JSON body out, a status and a JSON body back
    (Content-Length or chunked), one request at a time per connection."""

    class Failed(Exception):
        """The connection broke or the answer was not HTTP: counted as an error."""

    def __init__(self, url: str, connections: int, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout = timeout
        self.closed = False
        self._slots = asyncio.Semaphore(connections)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self, path: str, payload: Any, headers: dict[str, str]) -> tuple[int, Any]:
        if self.closed:
            raise RuntimeError("the client is closed")
        async with self._slots:
            reused = self._idle.pop() if self._idle else None
            try:
                try:
                    connection = reused or await asyncio.open_connection(self.host, self.port)
                    status, content, keep = await asyncio.wait_for(
                        self._exchange(*connection, path, payload, headers), self.timeout
                    )
                except (OSError, asyncio.IncompleteReadError, IndexError):
                    if reused is None:
                        raise
                    # uvicorn closes a connection idle for 5 s: once more on a fresh one.
                    reused[1].close()
                    connection = await asyncio.open_connection(self.host, self.port)
                    status, content, keep = await asyncio.wait_for(
                        self._exchange(*connection, path, payload, headers), self.timeout
                    )
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError) as error:
                raise LeanClient.Failed(str(error)) from error
            if keep:
                self._idle.append(connection)
            else:
                connection[1].close()
        return status, json.loads(content) if content else None

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        path: str,
        payload: Any,
        headers: dict[str, str],
    ) -> tuple[int, bytes, bool]:
        body = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        )
        writer.write(head.encode() + b"\r\n" + body)
        status = int((await reader.readline()).split()[1])
        length, chunked, keep = 0, False, True
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                chunked = "chunked" in value
            elif name == "connection":
                keep = "close" not in value
        if not chunked:
            return status, await reader.readexactly(length), keep
        content = b""
        while size := int((await reader.readline()).split(b";")[0], 16):
            content += await reader.readexactly(size)
            await reader.readline()
        await reader.readline()
        return status, content, keep

    async def aclose(self) -> None:
        self.closed = True
        for _reader, writer in self._idle:
            writer.close()
        self._idle.clear()


class SimulatedAgent:
    def __init__(self, node: str, token: str, stats: Stats) -> None:
        self.node = node
        self.headers = {"Authorization": f"Node {token}"}
        self.stats = stats
        self.running: dict[int, int] = {}  # replica → job
        self.exited: dict[int, int] = {}
        self.asked_back: float | None = None  # the answer's heartbeat_seconds, where sooner than ours

    def body(self) -> dict[str, Any]:
        processes = [{"replica": r, "state": "running", "pid": 1000 + r % 30000} for r in self.running]
        processes += [{"replica": r, "state": "exited", "exit_code": 143} for r in self.exited]
        busy = bool(self.running)
        samples = [
            {"index": i, "utilization": 95.0 if busy else 0.0, "memory_used_mib": 40000 if busy else 0}
            for i in range(GPUS)
        ]
        return {"node": self.node, "processes": processes, "samples": samples}

    async def beat(self, client: LeanClient) -> None:
        reported_exits = dict(self.exited)
        started = time.perf_counter()
        try:
            status, desired = await client.post("/api/v1/agent/heartbeat/", self.body(), self.headers)
        except LeanClient.Failed:
            self.stats.errors += 1
            return
        except RuntimeError:
            return  # the run is over: the client closed
        elapsed = time.perf_counter() - started
        self.stats.record(elapsed, status)
        if status != 200:
            return
        for replica in reported_exits:
            self.exited.pop(replica, None)
        self.asked_back = float(desired["heartbeat_seconds"])
        now = time.time()
        stopped = False
        for stop in desired["stops"]:
            if self.running.pop(stop["replica"], None) is not None:
                self.exited[stop["replica"]] = stop["job"]
                stopped = True
        for start in desired["starts"]:
            if start["replica"] not in self.running:
                self.running[start["replica"]] = start["job"]
                self.stats.started.setdefault(start["job"], now)
        if stopped:
            await self.beat(client)  # a process ended: the real agent beats at once

    async def run(self, client: LeanClient, interval: list[float], until: float) -> None:
        register = {
            "node": self.node,
            "gpus": [
                {"index": i, "uuid": f"GPU-{self.node}-{i}", "model": "", "memory_mib": 81920} for i in range(GPUS)
            ],
        }
        try:
            await client.post("/api/v1/agent/register/", register, self.headers)
        except LeanClient.Failed:
            self.stats.errors += 1
        await asyncio.sleep(random.uniform(0, interval[0]))
        while time.time() < until:
            await self.beat(client)
            # As the real agent (gqc.agent, BEAT_JITTER): a beat every interval, give or take a
            # tenth, or as soon as the console asks (its follow-up after a beat that freed devices;
            # the ramp's intervals are shorter than the console's own).
            wait = min(interval[0], self.asked_back or interval[0])
            next_at = time.monotonic() + wait * random.uniform(0.9, 1.1)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


class Stats:
    def __init__(self) -> None:
        self.latencies: list[tuple[float, float]] = []  # (wall time, seconds)
        self.statuses: dict[int, int] = defaultdict(int)
        self.errors = 0
        self.started: dict[int, float] = {}
        self.marks: list[tuple[float, str]] = []  # (wall time, what the load did then)
        self.began = time.time()

    def record(self, seconds: float, status: int) -> None:
        self.latencies.append((time.time(), seconds))
        self.statuses[status] += 1

    def window(self, start: float, end: float) -> list[float]:
        return [seconds for at, seconds in self.latencies if start <= at < end]


def _web_processes(launcher_pid: int) -> list[psutil.Process]:
    """uvicorn and, with WEB_CONCURRENCY > 1, its worker processes."""
    found = []
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "uvicorn" in command or "multiprocessing" in command:
            found.append(child)
    return found


def web_rss_mib(launcher_pid: int) -> float:
    """The web processes' resident memory together (the manager's and every worker's)."""
    total = 0.0
    for process in _web_processes(launcher_pid):
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss / 2**20
    return total or float("nan")


def cpu_seconds(launcher_pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by the web processes, and by the whole console
    (launcher, web, worker, beat, Redis): per beat, the figure the machine's load distorts least."""
    web = whole = 0.0
    web_pids = {process.pid for process in _web_processes(launcher_pid)}
    launcher = psutil.Process(launcher_pid)
    for process in [launcher, *launcher.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            used = times.user + times.system
            whole += used
            if process.pid in web_pids:
                web += used
    return web, whole


class CpuWindow:
    """CPU per beat over a window: the console's processes and this client's own."""

    def __init__(self, launcher_pid: int) -> None:
        self.launcher_pid = launcher_pid
        self.reset()

    def reset(self) -> None:
        self.web, self.whole = cpu_seconds(self.launcher_pid)
        self.client = time.process_time()

    def per_beat(self, beats: int) -> str:
        web, whole = cpu_seconds(self.launcher_pid)
        client = time.process_time()
        if not beats:
            return "no beats"
        return (
            f"CPU per beat: web {(web - self.web) / beats * 1000:.2f} ms, whole console "
            f"{(whole - self.whole) / beats * 1000:.2f} ms, load client {(client - self.client) / beats * 1000:.2f} ms"
        )


async def drive(
    url: str, tokens: list[tuple[str, str]], args: argparse.Namespace, world: dict[str, Any], launcher_pid: int
) -> Stats:
    stats = Stats()
    interval = [args.interval]
    started = time.time()
    total = args.seconds + (20 * len(args.ramp) if args.ramp else 0)
    until = started + total + 30  # the agents outlive the last step's window
    client = LeanClient(url, args.connections)
    submitter = Submitter()
    try:
        agents = [SimulatedAgent(node, token, stats) for node, token in tokens]
        tasks = [asyncio.create_task(agent.run(client, interval, until)) for agent in agents]
        loop = asyncio.get_running_loop()
        await asyncio.sleep(5)
        await loop.run_in_executor(None, partial(submitter.submit, "team-b", len(tokens), priority=3, prefix="fill"))
        # The client's own pauses would be measured as the console's: no collection from here on
        # (what it keeps is acyclic: reference counting frees it), and its loop's lag is printed.
        gc.freeze()
        gc.disable()
        lag = LoopLag()
        watcher = asyncio.create_task(lag.watch())
        minute = 0
        reclaim = 0
        rss: list[tuple[int, float]] = []
        cpu = CpuWindow(launcher_pid)
        while time.time() < started + args.seconds:
            await asyncio.sleep(30)
            elapsed = time.time() - started
            if elapsed > 60:
                reclaim += 1
                stats.marks.append((time.time(), f"reclaim {reclaim}: {args.reclaim} team-a jobs submitted"))
                await loop.run_in_executor(
                    None, partial(submitter.submit, "team-a", args.reclaim, priority=7, prefix=f"reclaim{reclaim}")
                )
            if int(elapsed // 60) > minute:
                minute = int(elapsed // 60)
                window = stats.window(time.time() - 60, time.time())
                rss.append((minute, web_rss_mib(launcher_pid)))
                print(
                    f"minute {minute}: {len(window) / 60:.0f} beats/s, p50 {percentile(window, 0.5) * 1000:.1f} ms, "
                    f"p99 {percentile(window, 0.99) * 1000:.1f} ms, max {max(window, default=0) * 1000:.0f} ms, "
                    f"web RSS {rss[-1][1]:.0f} MiB, statuses {dict(stats.statuses)}; {cpu.per_beat(len(window))}; "
                    f"load average {os.getloadavg()[0]:.2f}; client loop lag max {lag.take() * 1000:.0f} ms",
                    flush=True,
                )
                cpu.reset()
        for step in args.ramp:
            interval[0] = step
            mark = time.time()
            await asyncio.sleep(5)
            cpu.reset()
            await asyncio.sleep(15)
            window = stats.window(mark + 5, time.time())
            print(
                f"ramp interval {step:g} s: {len(window) / 15:.0f} beats/s, "
                f"p50 {percentile(window, 0.5) * 1000:.1f} ms, p99 {percentile(window, 0.99) * 1000:.1f} ms; "
                f"{cpu.per_beat(len(window))}; load average {os.getloadavg()[0]:.2f}; "
                f"client loop lag max {lag.take() * 1000:.0f} ms",
                flush=True,
            )
        watcher.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        gc.enable()
        submitter.close()
        await client.aclose()
    return stats


def write_timeline(stats: Stats, path: Path) -> None:
    """One line a second: beats answered, p50, p99 and max in ms, the wall clock's second (to line
    up with other readings of the machine), and what the load did then."""
    by_second: dict[int, list[float]] = defaultdict(list)
    for at, seconds in stats.latencies:
        by_second[int(at)].append(seconds)
    marks = {int(at): what for at, what in stats.marks}
    first = min(by_second, default=0)
    with path.open("w") as timeline:
        timeline.write("second beats p50_ms p99_ms max_ms epoch mark\n")
        for second in sorted(by_second):
            values = by_second[second]
            timeline.write(
                f"{second - first} {len(values)} {percentile(values, 0.5) * 1000:.1f} "
                f"{percentile(values, 0.99) * 1000:.1f} {max(values) * 1000:.1f} {second} {marks.get(second, '')}\n"
            )


def decision_figures(stats: Stats) -> None:
    from scheduling.models import JobEvent, JobEventKind

    admitted: dict[int, float] = {}  # each job's first admission: stats.started keeps its first start
    for job_id, at in JobEvent.objects.filter(kind=JobEventKind.ADMITTED).values_list("job_id", "at"):
        admitted[job_id] = min(admitted.get(job_id, at.timestamp()), at.timestamp())
    to_start = [stats.started[job] - at for job, at in admitted.items() if job in stats.started]
    print(
        f"decision → process started ({len(to_start)} jobs): p50 {percentile(to_start, 0.5):.2f} s, "
        f"p99 {percentile(to_start, 0.99):.2f} s"
    )
    # The cluster's fill (a thousand starts at once, while a thousand agents register) apart: the
    # jobs admitted after the first minute, team-a's reclaiming ones.
    steady = [stats.started[job] - at for job, at in admitted.items() if job in stats.started and at > stats.began + 60]
    print(
        f"  of which admitted after the first minute ({len(steady)} jobs): p50 {percentile(steady, 0.5):.2f} s, "
        f"p99 {percentile(steady, 0.99):.2f} s"
    )
    evicted: dict[int, list[float]] = defaultdict(list)
    for job_id, at in JobEvent.objects.filter(kind=JobEventKind.EVICTED).values_list("job_id", "at"):
        evicted[job_id].append(at.timestamp())
    freed = []
    for job_id, at in JobEvent.objects.filter(kind=JobEventKind.REQUEUED).values_list("job_id", "at"):
        before = [t for t in evicted.get(job_id, []) if t <= at.timestamp()]
        if before:
            freed.append(at.timestamp() - max(before))
    print(
        f"stop decision → devices freed ({len(freed)} evictions, grace 1 s): p50 {percentile(freed, 0.5):.2f} s, "
        f"p99 {percentile(freed, 0.99):.2f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--reclaim", type=int, default=20, help="team-a jobs submitted every 30 s")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--ramp", type=float, nargs="*", default=[], help="intervals to step through, e.g. 4 3 2 1.5 1")
    parser.add_argument("--port", type=int, default=8471)
    parser.add_argument(
        "--web-processes", type=int, default=1, help="the console's WEB_CONCURRENCY (uvicorn processes)"
    )
    parser.add_argument("--database", default="agentbench", help="the scratch PostgreSQL database's name")
    parser.add_argument("--timeline", type=Path, help="write each second's beats, p50, p99 and max here")
    args = parser.parse_args()

    server = os.environ.get("DATABASE_URL", "")
    database_url = fresh_postgres(server, args.database) if server.startswith("postgres") else ""
    scratch = Path(tempfile.mkdtemp(prefix="agent-bench-"))
    if not database_url:
        database_url = f"sqlite:///{scratch / 'console.sqlite3'}"
    os.environ.update(
        {
            "CONSOLE_DEMO": "0",
            "AGENT_HEARTBEAT_SECONDS": str(args.interval),
            "DATABASE_URL": database_url,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "WEB_CONCURRENCY": str(args.web_processes),
        }
    )
    os.environ.pop("REDIS_URL", None)
    try:
        with running_console(port=args.port, database_url=database_url) as console:
            import django
            from django.conf import settings

            django.setup()
            settings.SCHEDULER_TRIGGER = "none"  # the console's beat runs the cycles
            settings.SCHEDULER_PUBLISH_EVENTS = False  # this process has no Channels layer of its own
            tokens, world = setup_world(args.agents)
            print(
                f"{args.agents} agents, a beat every {args.interval:g} s ({args.agents / args.interval:.0f}/s), "
                f"{'PostgreSQL' if server.startswith('postgres') else 'SQLite'}, {args.web_processes} web "
                f"process(es), load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            stats = asyncio.run(drive(console.url, tokens, args, world, console.process.pid))
            all_latencies = [seconds for _at, seconds in stats.latencies]
            print(
                f"all beats: {len(all_latencies)}, p50 {percentile(all_latencies, 0.5) * 1000:.1f} ms, "
                f"p99 {percentile(all_latencies, 0.99) * 1000:.1f} ms, errors {stats.errors}, "
                f"statuses {dict(stats.statuses)}"
            )
            settled = [seconds for at, seconds in stats.latencies if at >= stats.began + 60]
            print(
                f"beats after the first minute: {len(settled)}, p50 {percentile(settled, 0.5) * 1000:.1f} ms, "
                f"p99 {percentile(settled, 0.99) * 1000:.1f} ms"
            )
            decision_figures(stats)
            if args.timeline:
                write_timeline(stats, args.timeline)
    finally:
        if server.startswith("postgres"):
            drop_postgres(database_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
