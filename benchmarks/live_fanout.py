"""Live fan-out under load (issue 12): 200 signed-in websocket clients on `/ws/live/`, each
subscribed to `cluster` and one quota, while S3-sized cycles commit and publish.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wsbench REDIS_URL=redis://127.0.0.1:6379/11 \\
      prlimit --as=4000000000 .venv/bin/python benchmarks/live_fanout.py [--port 8120] [--rounds 20]

- The database named in DATABASE_URL is created afresh (and dropped after) on that PostgreSQL
  server with S3 written in bulk (benchmarks/engine.py: 1,000 nodes x 8 GPUs, 1,110 quotas,
  5,000 running and 10,000 pending jobs); REDIS_URL's database is flushed: it must be one of
  your own. Set-up is not measured.
- The web process is the one `bin/run` starts (console.launcher's process table: uvicorn on
  console.asgi, the Redis channel layer), on --port.
- 200 users, members of the S3 root workspaces, each with a database session; their sockets
  send the session cookie (a second process, the `websockets` client) and subscribe to
  `cluster` and one quota each: the 10 roots, the 100 second-level quotas, 90 leaves.
- Then this process drives the scheduler as the worker would, publishing after every commit:
  the first cycle (the heaviest commit), and --rounds rounds of "--finish running jobs finish
  (one commit each, as executors report them), then a cycle admits into the freed GPUs".

What is measured (client and server on the same machine, one clock):
- Every change is stamped with its commit's time (`committed_at`, scheduling/live.py). An
  observer in the client process joins each subscribed topic's Channels group directly, so it
  hears every commit's change of that topic as published: the ground truth.
- Commit to client: for each (client, subscribed topic, published commit), the first message
  the client receives on that topic whose `committed_at` is that commit's or newer (a coalesced
  message carries the newest commit merged into it, and its figures supersede the older ones),
  minus the commit's time. It includes the coalescing hold (at most LIVE_COALESCE_SECONDS per
  topic and socket): p50, p99, max.
- Message age: for each message received, receive time minus its `committed_at`.
- Dropped: a (client, topic, commit) that no message covers by the end (after a drain of
  --drain seconds): the commit's change never reached a client subscribed to it.
- The web process's resident memory (VmRSS) before the clients connect, once they are
  subscribed, and at the end; its CPU time (user + system) over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLIENTS = 200
DEFAULT_REDIS = "redis://127.0.0.1:6379/11"
CONNECT_AT_ONCE = 20


# --- the client process: 200 sockets and the observer -----------------------------------------


async def _client(
    index: int, url: str, origin: str, cookie: str, topics: list[str], received: list[tuple[int, str, float, float]]
) -> Any:
    from websockets.asyncio.client import connect

    socket = await connect(url, origin=origin, additional_headers={"Cookie": cookie}, max_size=2**20)  # type: ignore[arg-type]
    await socket.send(json.dumps({"subscribe": topics}))
    answer = json.loads(await socket.recv())
    if answer.get("type") != "subscription" or sorted(answer["subscribed"]) != sorted(topics):
        raise SystemExit(f"client {index}: subscription answered {answer}")

    async def listen() -> None:
        async for frame in socket:
            at = time.time()
            message = json.loads(frame)
            if message.get("type") == "change":
                received.append((index, message["topic"], float(message.get("committed_at", 0.0)), at))

    return socket, asyncio.create_task(listen())


async def _observe(layer: Any, topic: str, group: str, published: list[tuple[str, float, float]]) -> None:
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    while True:
        message = await layer.receive(channel)
        published.append((topic, float(message.get("committed_at", 0.0)), time.time()))


async def _clients_main(spec_path: str, out_path: str) -> None:
    from channels_redis.core import RedisChannelLayer

    spec = json.loads(Path(spec_path).read_text())
    received: list[tuple[int, str, float, float]] = []
    published: list[tuple[str, float, float]] = []
    layer = RedisChannelLayer(hosts=spec["hosts"], prefix=spec["prefix"])
    groups: dict[str, str] = spec["groups"]  # topic → its Channels group (scheduling.live.topic_group)
    observers = [asyncio.create_task(_observe(layer, topic, group, published)) for topic, group in groups.items()]
    sockets: list[Any] = []
    started = time.perf_counter()
    for first in range(0, len(spec["clients"]), CONNECT_AT_ONCE):
        batch = spec["clients"][first : first + CONNECT_AT_ONCE]
        sockets += await asyncio.gather(
            *(
                _client(first + k, spec["url"], spec["origin"], client["cookie"], client["topics"], received)
                for k, client in enumerate(batch)
            )
        )
    print(f"ready {len(sockets)} {time.perf_counter() - started:.1f}", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # the driver closes stdin when done
    for socket, listener in sockets:
        listener.cancel()
        await socket.close()
    for observer in observers:
        observer.cancel()
    Path(out_path).write_text(json.dumps({"received": received, "published": published}))


# --- the driver: database, web process, cycles, analysis ---------------------------------------


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM when this process dies, however it dies (no orphan server)."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop(process: subprocess.Popen[Any] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


class OverCapacity(logging.Handler):
    """Counts channels_redis's "over capacity" lines: messages the layer refused (dropped) because
    a process's inbox was full, as the publisher (this process) sees them."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.refused = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "over capacity" in record.getMessage():
            self.refused += 1


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def _wait_for_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers (503 here: no worker nor beat runs beside it, on purpose)
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"the web process did not answer {url} within {seconds:.0f} s")


def analyse(
    clients: list[dict[str, Any]], received: list[list[Any]], published: list[list[Any]], coalesce_seconds: float
) -> dict[str, Any]:
    """Commit-to-client delays and drops, per the module's definitions."""
    commits: dict[str, list[float]] = defaultdict(list)
    # Commit to the channel layer (the publisher's read-back and its group_sends), as the observer
    # hears it: the publisher's share of the delay; the rest is the consumers' and the sockets'.
    published_delays = [observed - stamp for _, stamp, observed in published]
    for topic, stamp, _ in published:
        commits[topic].append(stamp)
    by_client_topic: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    ages: list[float] = []
    for index, topic, stamp, at in received:
        by_client_topic[(index, topic)].append((at, stamp))
        ages.append(at - stamp)
    delays: list[float] = []
    delays_by_kind: dict[str, list[float]] = defaultdict(list)
    dropped: list[tuple[int, str, float]] = []
    expected = 0
    immediate: list[float] = []
    for index, client in enumerate(clients):
        for topic in client["topics"]:
            messages = sorted(by_client_topic.get((index, topic), []))
            arrivals = [at for at, _ in messages]
            for stamp in sorted(set(commits.get(topic, []))):
                expected += 1
                position = next((k for k, (_, carried) in enumerate(messages) if carried >= stamp), None)
                if position is None:
                    dropped.append((index, topic, stamp))
                    continue
                covering = arrivals[position]
                delays.append(covering - stamp)
                delays_by_kind[topic.split(":")[0]].append(covering - stamp)
                # Not held by coalescing: the socket had sent nothing on this topic for a window
                # before (a held message goes out a window after the previous one).
                if position == 0 or covering - arrivals[position - 1] > coalesce_seconds + 0.05:
                    immediate.append(covering - stamp)
    return {
        "commits_published": sum(len(set(stamps)) for stamps in commits.values()),
        "topics": len(commits),
        "deliveries_expected": expected,
        "messages_received": len(received),
        "delay_p50_ms": _percentile(delays, 0.5) * 1000,
        "delay_p99_ms": _percentile(delays, 0.99) * 1000,
        "delay_max_ms": max(delays, default=float("nan")) * 1000,
        "by_kind": {
            kind: (len(values), _percentile(values, 0.5) * 1000, _percentile(values, 0.99) * 1000)
            for kind, values in sorted(delays_by_kind.items())
        },
        "immediate": (
            len(immediate),
            _percentile(immediate, 0.5) * 1000,
            _percentile(immediate, 0.99) * 1000,
        ),
        "published_p50_ms": _percentile(published_delays, 0.5) * 1000,
        "published_p99_ms": _percentile(published_delays, 0.99) * 1000,
        "age_p50_ms": _percentile(ages, 0.5) * 1000,
        "age_p99_ms": _percentile(ages, 0.99) * 1000,
        "dropped": len(dropped),
        "dropped_examples": dropped[:5],
    }


def _subscriptions(user_count: int) -> list[tuple[str, str]]:
    """(root workspace name, quota name) per user: the roots, the second level, then leaves."""
    from quotas.models import Quota

    names = list(Quota.objects.order_by("id").values_list("name", flat=True))
    roots = [name for name in names if name.count(".") == 0]
    middles = [name for name in names if name.count(".") == 1]
    leaves = [name for name in names if name.count(".") == 2]
    chosen = (roots + middles + leaves[:: max(1, len(leaves) // 90)])[:user_count]
    return [(f"ws-{name.split('.')[0]}", name) for name in chosen]


def _sign_in(user_count: int) -> list[dict[str, Any]]:
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.utils.module_loading import import_string

    from quotas.models import Quota
    from workspaces.models import Membership, Workspace

    store = import_module(settings.SESSION_ENGINE).SessionStore
    # The backend a password sign-in records (the first that can load a user; axes' cannot).
    backend = next(path for path in settings.AUTHENTICATION_BACKENDS if hasattr(import_string(path), "get_user"))
    quota_ids = dict(Quota.objects.values_list("name", "id"))
    workspaces = dict(Workspace.objects.values_list("name", "id"))
    clients = []
    for number, (workspace, quota) in enumerate(_subscriptions(user_count)):
        user = get_user_model().objects.create_user(username=f"watcher{number:03d}", password=None)
        Membership.objects.create(workspace_id=workspaces[workspace], user=user, role="viewer")
        session = store()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = backend
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        clients.append(
            {
                "cookie": f"{settings.SESSION_COOKIE_NAME}={session.session_key}",
                "topics": ["cluster", f"quota:{quota_ids[quota]}"],
            }
        )
    return clients


def _drive(rounds: int, finish: int, seed: int, *, finish_commits: str = "each") -> list[str]:
    """The first cycle, then `rounds` of finishing jobs and a cycle. With `finish_commits`
    "each", every job finishes in its own commit (a burst: each quota topic changes about ten
    times a second, so coalescing holds changes); with "tick", they finish in one commit, as the
    simulated executor's tick finishes the jobs that are due (the runtime's own shape)."""
    from scheduling import services
    from scheduling.cycle import run_cycle
    from scheduling.executors.simulated import SimulatedExecutor
    from scheduling.models import Job, JobState

    rng = random.Random(seed)
    lines = []
    started = time.perf_counter()
    outcome = run_cycle(trigger="benchmark")
    lines.append(
        f"  first cycle: {(time.perf_counter() - started) * 1000:.0f} ms, admitted {outcome.admitted}, "
        f"evicted {outcome.evicted}"
    )
    for number in range(rounds):
        running = list(Job.objects.filter(state=JobState.RUNNING).values_list("pk", flat=True))
        started = time.perf_counter()
        finishing = list(Job.objects.filter(pk__in=rng.sample(running, min(finish, len(running)))))
        if finish_commits == "tick":
            for job in finishing:
                job.duration = job.duration or 1.0  # the executor's event names the run time
            SimulatedExecutor().finish_jobs(finishing)
        else:
            for job in finishing:
                services.finish_job(job=job)
        finished_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        outcome = run_cycle(trigger="benchmark")
        lines.append(
            f"  round {number + 1}: {finish} finished in {finished_ms:.0f} ms; cycle "
            f"{(time.perf_counter() - started) * 1000:.0f} ms, admitted {outcome.admitted}, evicted {outcome.evicted}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8120)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--finish", type=int, default=20, help="running jobs that finish before each cycle")
    parser.add_argument(
        "--finish-commits",
        choices=("each", "tick"),
        default="each",
        help="each: one commit per finished job (a burst); tick: one commit for them all, as the executor's tick",
    )
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--drain", type=float, default=15.0, help="seconds to wait for late messages after the rounds")
    parser.add_argument("--raw", default="/tmp/live_fanout_raw.json", help="every message, for a closer look")
    parser.add_argument("--web-log", default="/tmp/live_fanout_web.log", help="where the web process's output goes")
    parser.add_argument("--clients-spec", help=argparse.SUPPRESS)  # the client process's own arguments
    parser.add_argument("--clients-out", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.clients_spec:
        asyncio.run(_clients_main(arguments.clients_spec, arguments.clients_out))
        return

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("Set DATABASE_URL to postgres://…/<a database name of yours>: it is created afresh and dropped.")
    os.environ.setdefault("REDIS_URL", DEFAULT_REDIS)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.test.utils import override_settings

    from benchmarks.engine import cluster
    from benchmarks.runtime_support import scratch_postgres, write_snapshot
    from console.launcher import _process_table
    from scheduling.live import topic_group

    over_capacity = OverCapacity()
    logging.getLogger("channels_redis.core").addHandler(over_capacity)
    logging.getLogger("channels_redis.core").setLevel(logging.INFO)
    name = url.rsplit("/", 1)[1] or "wsbench"
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    overrides = {"SCHEDULER_TRIGGER": "none", "SCHEDULER_PUBLISH_EVENTS": True, "SCHEDULER_LOCK": "postgres"}
    with override_settings(**overrides), scratch_postgres(url, name), tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        write_snapshot(cluster(5000, 10_000, 1000))
        clients = _sign_in(arguments.clients)
        print(f"set-up: S3 and {len(clients)} signed-in users in {time.perf_counter() - started:.0f} s", flush=True)
        web_env = {**os.environ, "DATABASE_URL": url, "SCHEDULER_TRIGGER": "none"}
        with Path(arguments.web_log).open("w") as web_log:
            web = subprocess.Popen(
                _process_table(arguments.port, "127.0.0.1")["web"],
                cwd=ROOT,
                env=web_env,
                stdout=web_log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
            watchers = None
            try:
                _wait_for_http(f"http://127.0.0.1:{arguments.port}/healthz", 60)
                rss_start = _rss_kib(web.pid)
                spec = Path(scratch, "clients.json")
                out = Path(scratch, "received.json")
                layer_config = cast(dict[str, Any], settings.CHANNEL_LAYERS["default"]["CONFIG"])
                prefix = layer_config.get("prefix", "asgi")
                spec.write_text(
                    json.dumps(
                        {
                            "url": f"ws://127.0.0.1:{arguments.port}/ws/live/",
                            "origin": f"http://127.0.0.1:{arguments.port}",
                            "hosts": layer_config["hosts"],  # the web process's, read timeout included
                            "prefix": prefix,
                            "clients": clients,
                            "groups": {topic: topic_group(topic) for client in clients for topic in client["topics"]},
                        }
                    )
                )
                watchers = subprocess.Popen(
                    [sys.executable, __file__, "--clients-spec", str(spec), "--clients-out", str(out)],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    preexec_fn=_die_with_parent,
                )
                assert watchers.stdout is not None and watchers.stdin is not None
                ready = watchers.stdout.readline().split()
                if not ready or ready[0] != "ready":
                    raise SystemExit("the client process did not get ready")
                print(f"{ready[1]} sockets subscribed in {ready[2]} s", flush=True)
                rss_subscribed = _rss_kib(web.pid)
                cpu_before = _cpu_seconds(web.pid)
                load_before = os.getloadavg()
                started = time.perf_counter()
                lines = _drive(
                    arguments.rounds, arguments.finish, arguments.seed, finish_commits=arguments.finish_commits
                )
                driven_s = time.perf_counter() - started
                time.sleep(arguments.drain)
                cpu_web = _cpu_seconds(web.pid) - cpu_before
                rss_end = _rss_kib(web.pid)
                load_after = os.getloadavg()
                watchers.stdin.close()
                watchers.wait(timeout=120)
                results = json.loads(out.read_text())
                Path(arguments.raw).write_text(json.dumps({"clients": clients, **results}))
            finally:
                for process in (web, watchers):
                    _stop(process)
            web_lines = Path(arguments.web_log).read_text().splitlines()
    coalesce_seconds = float(getattr(settings, "LIVE_COALESCE_SECONDS", 1.0))
    figures = analyse(clients, results["received"], results["published"], coalesce_seconds)
    print("\n".join(lines))
    print(
        f"\n{len(clients)} clients, {arguments.rounds} rounds in {driven_s:.1f} s; "
        f"{figures['commits_published']} commits published on {figures['topics']} subscribed topics, "
        f"{figures['deliveries_expected']} (client, topic, commit) deliveries expected, "
        f"{figures['messages_received']} messages received"
    )
    print(
        f"commit to client: p50 {figures['delay_p50_ms']:.0f} ms, p99 {figures['delay_p99_ms']:.0f} ms, "
        f"max {figures['delay_max_ms']:.0f} ms (target p99 <= 500 ms); message age p50 "
        f"{figures['age_p50_ms']:.0f} ms, p99 {figures['age_p99_ms']:.0f} ms; of which commit to the channel "
        f"layer (observer) p50 {figures['published_p50_ms']:.0f} ms, p99 {figures['published_p99_ms']:.0f} ms"
    )
    for kind, (count, p50, p99) in figures["by_kind"].items():
        print(f"  {kind} topics: {count} deliveries, p50 {p50:.0f} ms, p99 {p99:.0f} ms")
    count, p50, p99 = figures["immediate"]
    print(
        f"  not held by coalescing (the socket sent nothing on the topic in the {coalesce_seconds:g} s before): "
        f"{count} deliveries, p50 {p50:.0f} ms, p99 {p99:.0f} ms; the others waited for the window to end"
    )
    print(f"refused by the channel layer (a process's inbox over capacity): {over_capacity.refused} group sends")
    print(f"dropped: {figures['dropped']} (target 0) {figures['dropped_examples'] or ''}")
    print(
        f"web process RSS: {rss_start / 1024:.0f} MiB at start, {rss_subscribed / 1024:.0f} MiB with the sockets "
        f"subscribed, {rss_end / 1024:.0f} MiB at the end; web CPU over the rounds {cpu_web:.1f} s"
    )
    tracebacks = sum(line.startswith("Traceback") for line in web_lines)
    print(f"web process log ({arguments.web_log}): {len(web_lines)} lines, {tracebacks} tracebacks")
    print(
        f"load average: {' '.join(f'{value:.2f}' for value in load_before)} before the rounds, "
        f"{' '.join(f'{value:.2f}' for value in load_after)} after"
    )


if __name__ == "__main__":
    main()
