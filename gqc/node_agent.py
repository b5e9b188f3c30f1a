"""The node agent's work (AGENT.md): register, beat, make the console's desired state so, report
back. Its command is gqc/agent.py (`python -m gqc.agent`), which says why it is plain Python.

What it keeps in `--state-dir` is what makes a restart safe: one JSON file per replica it
started (pid, process start time, log offset, stop deadline), the exit codes its wrapper writes,
and the replicas it has finished with. A restarted agent adopts the processes still alive (same
pid and same start time, so a reused pid is never mistaken for a job), reports the others as
exited, and never starts a replica it has a record of.

Replica ids are one console's numbering: a console with a new database numbers from 1 again. So
the state directory records whose it is (`identity.json`: the console's identity and the node's,
from the registration answer), and a directory of another identity is not trusted: its processes
are reported once at registration for the console to decide (keep or stop), and its done list is
set aside (`set-aside/`), with one log line. A start it does not carry out is logged once, with why.

Each replica runs in a subshell of a small `sh` wrapper in a session of its own, which waits for
it even through SIGTERM and writes its exit code to a file, so the code survives a restart of the
agent (gqc/replica_process.py). A stop is SIGTERM to the process group, then SIGKILL once the grace
has passed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gqc import __version__
from gqc.console_link import ConsoleLink, ConsoleUnreachable, HttpxLink, open_link
from gqc.gpus import Gpus
from gqc.pace import BEAT_JITTER as BEAT_JITTER
from gqc.pace import EXIT_GATHER_SECONDS, IDLE_SECONDS, POLL_SECONDS, ReadingsPace
from gqc.pace import beat_delay as beat_delay
from gqc.replica_process import SpareFiles, job_environment, read_small, reap, spawn, wrapper_script, write_new
from gqc.replicas import LOG_LINES_PER_BEAT as LOG_LINES_PER_BEAT
from gqc.replicas import Replica, _alive, _start_time, child_wakeups, new_log

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("gqc.agent")  # the command's name, which log filters use

# Replicas finished with, remembered so that a late duplicate start is refused after a restart.
DONE_REMEMBERED = 10_000
# The state directory's owner: {"console": the console's identity, "node_id": the node's}.
IDENTITY_FILE = "identity.json"
# Where a state directory of another identity is moved aside (done list, replicas not kept, logs).
SET_ASIDE = "set-aside"
# The exit code reported for a process that vanished without one (killed with its wrapper).
EXIT_UNKNOWN = 255


class Agent:
    def __init__(
        self,
        *,
        server: str,
        node: str,
        token: str,
        gpus: Gpus,
        state_dir: Path,
        client: httpx.Client | None = None,
    ) -> None:
        """`client`: an httpx client to talk through instead of the agent's own link (tests)."""
        self.node = node
        self.gpus = gpus
        # Absolute: the wrapper runs there, and the paths it is given are from there.
        self.state_dir = state_dir.absolute()
        self.replicas_dir = self.state_dir / "replicas"
        self.logs_dir = self.state_dir / "logs"
        for folder in (self.replicas_dir, self.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        # The state directory's paths as text, made once: pathlib's joins were a tenth of a job's CPU.
        self._root, self._replicas, self._logs = str(self.state_dir), str(self.replicas_dir), str(self.logs_dir)
        self._spares = SpareFiles(self._replicas)  # state and exit-code files used again
        self.link: ConsoleLink = HttpxLink(client) if client is not None else open_link(server, token)
        self.heartbeat_seconds = 2.0
        self.readings = ReadingsPace()  # which beats carry the GPUs' readings
        # The agent's environment, copied once: reading os.environb name by name cost each start
        # 0.1 ms, and nothing in the agent changes its own environment.
        self._own_environment = dict(os.environb)
        # The pids of the processes this agent started and has not reaped yet, by replica.
        self.children: dict[int, int] = {}
        self.held: dict[int, Replica] = {}
        self.done: list[int] = self._load_done()
        self._done_ids = set(self.done)  # `in self.done` at each start would walk 10,000 ids
        self.owner: tuple[str, int | None] = self._load_owner()
        # Processes of another console's state, told to stop: watched until gone, never reported.
        self.foreign: dict[int, Replica] = {}
        # Starts not carried out, each logged once.
        self.declined: set[int] = set()
        self.stopping = False
        self.device_memory = {d["index"]: int(d["memory_mib"]) for d in gpus.devices()}
        self._adopt()

    # --- the state directory ---

    def _path(self, replica: int) -> str:
        return f"{self._replicas}/{replica}.json"

    def _exit_path(self, replica: int) -> str:
        return f"{self._replicas}/{replica}.exit"

    def _log_path(self, replica: Replica | int, job: int | None = None) -> str:
        if isinstance(replica, Replica):
            return f"{self._logs}/{replica.job}-{replica.replica}.log"
        return f"{self._logs}/{job}-{replica}.log"

    def _save(self, replica: Replica, *, new: bool = False) -> None:
        """Write the replica's state file: a new one directly, a rewrite through a temporary file
        and a rename, so that a restart finds the old or the new record, never half of one."""
        data = json.dumps(vars(replica)).encode()  # the fields in order, as asdict gives them
        path = self._path(replica.replica)
        if new:
            self._spares.take(path)
            write_new(path, data)
            return
        write_new(f"{self._replicas}/{replica.replica}.tmp", data)
        os.replace(f"{self._replicas}/{replica.replica}.tmp", path)

    def _load_done(self) -> list[int]:
        try:
            return [int(r) for r in json.loads((self.state_dir / "done.json").read_text())]
        except (OSError, ValueError):
            return []

    def _load_owner(self) -> tuple[str, int | None]:
        try:
            owner = json.loads((self.state_dir / IDENTITY_FILE).read_text())
            node_id = owner.get("node_id")
            return str(owner.get("console") or ""), int(node_id) if node_id is not None else None
        except (OSError, ValueError, TypeError, AttributeError):
            return "", None

    def _claim(self, registration: dict[str, Any]) -> None:
        """Make the state directory the registering console's (see the module's docstring): keep the
        replicas it adopts, stop the others still alive, set the done list and the rest aside."""
        console, node_id = str(registration["console"]), int(registration["node_id"])
        if (console, node_id) == self.owner:
            return
        kept = {int(r) for r in registration.get("adopt", [])}
        grace = float(registration.get("stop_grace_seconds", 10.0))
        previous = f"console {self.owner[0]} node {self.owner[1]}" if self.owner[0] else "no console recorded"
        aside = self.state_dir / SET_ASIDE / f"{time.strftime('%Y%m%dT%H%M%S')}-{self.owner[0] or 'unrecorded'}"
        moved = [f"{self._root}/done.json"] if self.done else []
        left = [r for r in self.held.values() if r.replica not in kept]
        for replica in left:
            del self.held[replica.replica]
            self.children.pop(replica.replica, None)
            moved += [self._path(replica.replica), self._exit_path(replica.replica), self._log_path(replica)]
        for path in moved:  # an exit-code file still empty (its wrapper runs) holds nothing to keep
            if os.path.exists(path) and (os.path.getsize(path) or not path.endswith(".exit")):
                aside.mkdir(parents=True, exist_ok=True)
                os.replace(path, aside / os.path.basename(path))
        # Stopped after their files moved: a wrapper that records its code now leaves it in
        # replicas/, where start() clears it before this console's replica of that id runs.
        stopped = 0
        for replica in left:
            if replica.exit_code is None and _alive(replica.pid, replica.started):
                replica.stop_deadline = time.time() + grace
                self.foreign[replica.replica] = replica
                self._signal(replica, signal.SIGTERM)
                stopped += 1
        if moved:
            logger.warning(
                "state directory %s belonged to %s, not to console %s node %s: its done list (%s replicas) and "
                "%s replicas set aside in %s, %s of them still running and told to stop; %s adopted",
                self.state_dir,
                previous,
                console,
                node_id,
                len(self.done),
                len(left),
                aside,
                stopped,
                len(self.held),
            )
        else:
            logger.info("state directory %s belongs to console %s node %s", self.state_dir, console, node_id)
        self.done = []
        self._done_ids = set()
        temporary = self.state_dir / "identity.tmp"
        temporary.write_text(json.dumps({"console": console, "node_id": node_id}))
        os.replace(temporary, self.state_dir / IDENTITY_FILE)
        self.owner = (console, node_id)

    def _decline(self, replica: int, job: int, why: str) -> None:
        if replica in self.declined:
            return
        if len(self.declined) >= DONE_REMEMBERED:
            self.declined.clear()
        self.declined.add(replica)
        logger.warning("declined the start of replica %s of job %s: %s", replica, job, why)

    def _forget(self, replicas: list[Replica]) -> None:
        """The console has recorded these exits: no more reports, and never a start again. The done
        list is written once for all of them, before their files go (a restart in between must
        find each either in the done list or in its file)."""
        for replica in replicas:
            self.held.pop(replica.replica, None)
            self.children.pop(replica.replica, None)
        self.done.extend(replica.replica for replica in replicas)
        self._done_ids.update(replica.replica for replica in replicas)
        if len(self.done) > DONE_REMEMBERED:
            self._done_ids.difference_update(self.done[:-DONE_REMEMBERED])
            del self.done[:-DONE_REMEMBERED]
        write_new(f"{self._root}/done.tmp", json.dumps(self.done).encode())
        os.replace(f"{self._root}/done.tmp", f"{self._root}/done.json")
        for replica in replicas:
            with contextlib.suppress(OSError):
                self._spares.put(self._path(replica.replica))
            with contextlib.suppress(OSError):
                self._spares.put(self._exit_path(replica.replica))
            with contextlib.suppress(OSError):
                os.unlink(self._log_path(replica))

    def _adopt(self) -> None:
        """After a restart: the replicas in the state directory, alive ones adopted, others exited."""
        for path in sorted(self.replicas_dir.glob("*.json")):
            try:
                replica = Replica(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                logger.warning("unreadable state file %s left alone", path)
                continue
            self.held[replica.replica] = replica
            if _alive(replica.pid, replica.started):
                logger.info("adopted replica %s of job %s (pid %s)", replica.replica, replica.job, replica.pid)
            else:
                self._record_exit(replica)

    # --- processes ---

    def _record_exit(self, replica: Replica, waited: int | None = None) -> None:  # waited: as reaped
        if replica.exit_code is not None:
            return
        code: int
        try:
            # The wrapper's record: sh's code, 128 + N for a command that signal N ended. It stays
            # until the console has the exit, so a restart reads it again: no state file rewrite.
            code = int(read_small(self._exit_path(replica.replica)).strip())
            replica.exit_code = code
        except (OSError, ValueError):
            # No record: the wrapper died with the group (SIGKILL), its command did not parse (its
            # own code, 2, as reaped), or it vanished while no agent watched.
            code = waited if waited is not None else (-signal.SIGKILL if replica.killed else EXIT_UNKNOWN)
            replica.exit_code = code
            self._save(replica)
        logger.info("replica %s of job %s exited with %s", replica.replica, replica.job, code)

    def start(self, start: dict[str, Any]) -> None:
        replica_id, job = int(start["replica"]), int(start["job"])
        if replica_id in self.held:
            return  # the same answer twice, or a start the console sent before it saw the report
        if replica_id in self._done_ids:
            # Reported exited and forgotten by this console's record: starting it again would run it twice.
            self._decline(replica_id, job, "it ran here and finished before (the state directory's done list)")
            return
        try:
            # An empty file for the wrapper's code, in place of one a process of a state set aside
            # (the same id from another console) left: that code is not this one's.
            self._spares.take(self._exit_path(replica_id))
            # The console's command, run as `sh -c` runs it (AGENT.md), in the state directory.
            script = wrapper_script(str(start["command"]), self._root, f"replicas/{replica_id}.exit")
            environment = job_environment(self._own_environment, start, self.device_memory)
            pid = spawn(script, environment, self._log_path(replica_id, job))
        except OSError as error:
            # Asked again at each beat, tried again each time; the console gives up after a few beats.
            self._decline(replica_id, job, f"cannot start its process ({error})")
            return
        replica = Replica(
            replica=replica_id,
            job=int(start["job"]),
            pid=pid,
            started=_start_time(pid) or "",
            gpus=[int(i) for i in start["gpus"]],
        )
        self.children[replica_id] = pid
        self.held[replica_id] = replica
        try:
            self._save(replica, new=True)
        except OSError as error:
            logger.warning("replica %s runs, but a restarted agent will not know it: %s", replica_id, error)
        logger.info("started replica %s of job %s (pid %s)", replica_id, replica.job, pid)

    def stop(self, stop: dict[str, Any]) -> None:
        replica = self.held.get(int(stop["replica"]))
        if replica is None or replica.exit_code is not None or replica.stop_deadline is not None:
            return  # not ours, gone already, or stopping: the first deadline stands
        replica.stop_deadline = time.time() + float(stop.get("grace_seconds", 0))
        self._save(replica)
        self._signal(replica, signal.SIGTERM)

    def _signal(self, replica: Replica, signum: int) -> None:
        if not _alive(replica.pid, replica.started):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(replica.pid, signum)  # the session leader's pid is the group's id

    def watch(self) -> bool:
        """Kill what outlived its grace, notice exits; True when a process exited (beat early)."""
        exited = False
        now = time.time()
        for replica in list(self.foreign.values()):
            if not _alive(replica.pid, replica.started):
                del self.foreign[replica.replica]
                logger.info("the other console's replica %s (pid %s) has stopped", replica.replica, replica.pid)
            elif replica.stop_deadline is not None and now >= replica.stop_deadline and not replica.killed:
                replica.killed = True
                self._signal(replica, signal.SIGKILL)
        for replica in list(self.held.values()):
            if replica.exit_code is not None:
                continue
            child = self.children.get(replica.replica)
            if child is not None:
                ended, waited = reap(child)
                if ended:
                    del self.children[replica.replica]
                    self._record_exit(replica, waited)
                    exited = True
                    continue
            elif not _alive(replica.pid, replica.started):
                self._record_exit(replica)
                exited = True
                continue
            if replica.stop_deadline is not None and now >= replica.stop_deadline and not replica.killed:
                replica.killed = True
                self._save(replica)
                self._signal(replica, signal.SIGKILL)
                logger.info("replica %s outlived its grace: SIGKILL", replica.replica)
        return exited

    # --- reports ---

    def report(self) -> tuple[dict[str, Any], dict[int, int]]:
        processes = []
        offsets: dict[int, int] = {}
        for replica in sorted(self.held.values(), key=lambda r: r.replica):
            lines, truncated, offsets[replica.replica] = new_log(self._log_path(replica), replica)
            entry: dict[str, Any] = {"replica": replica.replica, "pid": replica.pid, "log": lines}
            if truncated:
                entry["log_truncated"] = True
            if replica.exit_code is None:
                entry["state"] = "running"
            else:
                entry.update(state="exited", exit_code=max(-255, min(255, replica.exit_code)))
            processes.append(entry)
        body: dict[str, Any] = {"node": self.node, "processes": processes}
        if self.readings.due(time.monotonic()):  # otherwise the key is left out (it is optional)
            busy = {i for r in self.held.values() if r.exit_code is None for i in r.gpus}
            body["samples"] = self.gpus.samples(busy)
        return body, offsets

    def register(self) -> dict[str, Any]:
        console, node_id = self.owner
        held = [{"replica": r.replica, "job": r.job, "pid": r.pid} for r in self.held.values()]
        registration = self.link.post(
            "/api/v1/agent/register/",
            {
                "node": self.node,
                "version": __version__,
                "gpus": self.gpus.devices(),
                "state_console": console,
                "state_node_id": node_id,
                "held": held,
            },
        )
        self.heartbeat_seconds = float(registration.get("heartbeat_seconds", self.heartbeat_seconds))
        self.readings.follow(registration)
        if registration.get("mismatch"):
            logger.warning("the console cordoned %s: %s", self.node, "; ".join(registration["mismatch"]))
        if "console" in registration:  # a console older than identities keeps the directory as it is
            self._claim(registration)
        return registration

    def beat(self) -> dict[str, Any]:
        taken = time.monotonic()
        body, offsets = self.report()
        desired = self.link.post("/api/v1/agent/heartbeat/", body)
        if "samples" in body:
            self.readings.received_at = taken
        # The console has what this beat carried: move the log offsets on, forget the exited.
        recorded = []
        for replica_id, offset in offsets.items():
            replica = self.held.get(replica_id)
            if replica is None:
                continue
            if replica.exit_code is not None:
                recorded.append(replica)
            elif offset != replica.log_offset:
                replica.log_offset = offset
                self._save(replica)
        if recorded:
            self._forget(recorded)
        self.heartbeat_seconds = float(desired.get("heartbeat_seconds", self.heartbeat_seconds))
        self.readings.follow(desired)
        for stop in desired.get("stops", []):
            self.stop(stop)
        for start in desired.get("starts", []):
            self.start(start)
        return desired

    def run(self) -> None:
        """Register (retrying while the console is away), then beat until SIGTERM or SIGINT.

        Stopping the agent leaves its jobs running: a restarted agent adopts them."""
        signal.signal(signal.SIGTERM, self._stop_running)
        signal.signal(signal.SIGINT, self._stop_running)
        registered = False
        next_beat = 0.0
        with child_wakeups() as sleep:  # a child's exit (or SIGTERM) ends the sleep at once
            while not self.stopping:
                if self.watch():  # an exit: reported soon, with those of its siblings in the same beat
                    next_beat = min(next_beat, time.monotonic() + EXIT_GATHER_SECONDS)
                if time.monotonic() >= next_beat:
                    try:
                        if not registered:
                            self.register()
                            registered = True
                        self.beat()
                    except (ConsoleUnreachable, ValueError) as error:
                        logger.warning("console unreachable or refused: %s", error)
                    except OSError as error:  # the state directory: full, or not writable
                        logger.warning("state directory %s: %s", self.state_dir, error)
                    next_beat = time.monotonic() + beat_delay(self.heartbeat_seconds)
                if not self.stopping:
                    sleep(self._idle_seconds(next_beat))

    def _idle_seconds(self, next_beat: float) -> float:
        """How long the loop may sleep: until the next beat, a stop deadline, or the next look at
        processes that are not its children (no SIGCHLD comes for them), at most IDLE_SECONDS."""
        idle = min(IDLE_SECONDS, next_beat - time.monotonic())
        if self.foreign or any(
            replica.exit_code is None and (replica.replica not in self.children or replica.stop_deadline is not None)
            for replica in self.held.values()
        ):
            idle = min(idle, POLL_SECONDS)
        return max(0.0, idle)

    def _stop_running(self, signum: int, frame: object) -> None:
        self.stopping = True
