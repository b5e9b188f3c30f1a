"""How the node agent starts a replica's process and learns how it ended (docs/agent.md, "What the
agent does on the host").

A replica runs in a session of its own under one `sh`, the wrapper: it runs the console's command
in a subshell, waits for it even through SIGTERM (a trap with a command defers to the foreground
job; a subshell resets it to the default, so the command itself is ended by the signal), and then
writes the command's exit code to a file, so the code survives a restart of the agent. The
command's text is part of the wrapper's script, first on its first line, so the shell's own
messages read as they would under `sh -c COMMAND` ("sh: 1: nosuchcmd: not found", with the
command's line numbers), `$0` is `sh` and there are no positional parameters, and `$$` is the
wrapper's pid: the pid the agent records and reports, the id of the job's process group.

One `sh` a job instead of two (a wrapper that ran `sh -c "$0"`): an `exec` of the shell is about
0.45 ms of CPU, a third of what an agent spent on a job of `true` (docs/benchmarks-runtime.md).
The process is started with posix_spawn, not subprocess.Popen: no error pipe, no Popen object, and
the environment handed over as it is, for another 0.15 ms a job.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
from typing import Any

# The agent's own shell, found on the agent's PATH once: the wrapper is the agent's, and a job's
# PATH (its environment) does not decide which shell runs it.
SHELL = shutil.which("sh") or "/bin/sh"
# What Python changes in its own process that an exec would pass on: SIGPIPE (and SIGXFSZ) are
# ignored in the agent; a job starts with them at the default, as subprocess restores them.
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def wrapper_script(command: str, workdir: str, exit_file: str) -> str:
    """The wrapper's script: in `workdir`, the command in a subshell, its code to `exit_file`
    (relative to `workdir`). Written in place, without a rename: the agent reads the file only
    once the wrapper has exited, so it never sees half of it (an `mv` was one more exec a job); a
    file left empty by a wrapper killed while writing reads as no record.

    The command is followed by a newline, so that a comment on its last line ends there. The
    whole command is parsed before any of it runs: one that does not parse runs nothing and
    exits 2 (sh's code for it) with sh's message, and writes no file (the agent that reaps the
    wrapper records the 2 itself)."""
    return (
        f"cd {shlex.quote(workdir)}||exit;trap : TERM INT HUP;({command}\n"
        f");c=$?;printf '%s\\n' $c >{shlex.quote(exit_file)};exit $c"
    )


def job_environment(own: dict[bytes, bytes], start: dict[str, Any], memory_mib: dict[int, int]) -> dict[bytes, bytes]:
    """The agent's environment (`own`), the job's over it, the devices' over both, for a start of
    the console's answer; in bytes, as exec takes it. `memory_mib`: each device's memory."""
    fraction = float(start.get("fraction", 1.0))
    job = {str(k): str(v) for k, v in start.get("environment", {}).items()}
    job["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in start["gpus"])
    # The indices are NVML's, which go in PCI bus order; CUDA's own order puts the fastest
    # device first, so on a host of mixed GPUs index 1 would be another device to CUDA.
    job["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if fraction < 1:
        job["GPU_QUOTA_FRACTION"] = f"{fraction:g}"
        device = start["gpus"][0] if start["gpus"] else 0
        job["GPU_QUOTA_MEMORY_MIB"] = str(int(memory_mib.get(device, 0) * fraction))
        if own.get(b"CUDA_MPS_PIPE_DIRECTORY"):
            job["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(fraction * 100)))
    environment = own.copy()
    environment.update((os.fsencode(name), os.fsencode(value)) for name, value in job.items())
    return environment


def spawn(script: str, environment: dict[bytes, bytes], log: str) -> int:
    """Start the wrapper running `script` in a new session, stdin from /dev/null, stdout and stderr
    appended to `log`; its pid. OSError when it cannot start (the log cannot be opened, no shell)."""
    output = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # not inheritable (PEP 446)
    try:
        return os.posix_spawn(
            SHELL,
            ["sh", "-c", script, "sh"],
            environment,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, output, 1),
                (os.POSIX_SPAWN_DUP2, output, 2),
            ],
            setsid=True,
            setsigdef=_DEFAULT_SIGNALS,
            setsigmask=(),
        )
    finally:
        os.close(output)


def reap(pid: int) -> tuple[bool, int | None]:
    """Whether the agent's child `pid` has ended, and its code as subprocess gives it (-N for
    signal N). A child that another waiter reaped first has ended with no code known here."""
    try:
        ended, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True, None
    return (True, os.waitstatus_to_exitcode(status)) if ended else (False, None)


def read_small(path: str) -> bytes:
    """A small file's bytes (a state file, an exit code, /proc/PID/stat) in one read, without
    the layers of open(): what the agent reads at every start and exit."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        return os.read(descriptor, 65536)
    finally:
        os.close(descriptor)


def write_new(path: str, data: bytes) -> None:
    """Write a file that held nothing yet (new, or a spare), without a temporary file and a rename:
    a process killed between the two left the temporary file alone and the state unknown just as
    an empty file does now, and a write this small is never cut by the process's death."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.write(descriptor, data)
    finally:
        os.close(descriptor)


def inherited_descriptors_closed_on_exec() -> None:
    """Mark the descriptors the agent inherited (beyond stdin, stdout, stderr) close-on-exec:
    posix_spawn passes on every inheritable descriptor, where subprocess closed them all (its
    close_fds). Python's own are never inheritable, so this is what a launcher left open."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        descriptor = int(name)
        if descriptor > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                os.set_inheritable(descriptor, False)


class SpareFiles:
    """Emptied files the agent keeps to use again (`replicas/*.spare`): creating a file is the
    dearest thing an agent did for a job (0.3 to 0.9 ms of CPU for each new inode on the
    benchmarks' VM, against 0.02 ms for a rename), and each job needed three. Only files that no
    process of a job holds open are kept: a replica's state file and its exit-code file, never its
    log (a process the job left behind may still write to it). They wait in the directory they
    serve, so that taking one and putting it back are renames within one directory."""

    SUFFIX = ".spare"

    def __init__(self, folder: str, kept: int = 64) -> None:
        self.folder, self.kept = folder, kept
        self.names = [f"{folder}/{name}" for name in os.listdir(folder) if name.endswith(self.SUFFIX)]

    def take(self, path: str) -> None:
        """Make `path` an empty file, in place of any file there: a spare renamed, else a new one."""
        while self.names:
            with contextlib.suppress(FileNotFoundError):  # a name the directory lost (removed by hand)
                os.replace(self.names.pop(), path)
                return
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))

    def put(self, path: str) -> None:
        """Instead of deleting `path` (in the folder): emptied and kept, or deleted when enough are kept."""
        with contextlib.suppress(FileNotFoundError):
            if len(self.names) >= self.kept:
                os.unlink(path)
                return
            spare = path + self.SUFFIX
            os.truncate(path, 0)
            os.replace(path, spare)
            self.names.append(spare)
