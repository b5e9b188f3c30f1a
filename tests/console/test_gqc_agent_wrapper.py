"""What a job's command sees and what its exit reports, under the agent's one-shell wrapper
(gqc/replica_process.py): `sh -c` as the command's shell would be, `$$` the pid the agent records,
exit codes through signals and agent restarts, and the state files used again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from gqc.agent import Agent, FakeGpus
from tests.console.agent_exits import wait_exit

ROOT = Path(__file__).resolve().parents[2]


def _agent(tmp_path: Path) -> Agent:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"starts": [], "stops": [], "heartbeat_seconds": 1})

    client = httpx.Client(base_url="http://console", transport=httpx.MockTransport(handler))
    return Agent(server="", node="n1", token="t", gpus=FakeGpus(2, "n1"), state_dir=tmp_path, client=client)


def _start(replica: int, command: str) -> dict[str, Any]:
    return {"replica": replica, "job": 7, "command": command, "environment": {}, "gpus": [0], "fraction": 1.0}


def _log(tmp_path: Path, replica: int) -> str:
    return (tmp_path / "logs" / f"7-{replica}.log").read_text()


def test_the_command_sees_sh_no_arguments_and_the_recorded_pid_as_its_shells(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.start(_start(1, 'echo "$0|$#|$1|$$|$(pwd)"; exit 3'))
    assert wait_exit(agent, 1) == 3
    # `$$` is the pid the console is told (the session leader, the process group's id); the
    # wrapper's own file is not among the command's parameters.
    assert _log(tmp_path, 1) == f"sh|0||{agent.held[1].pid}|{tmp_path}\n"


def test_the_shells_own_messages_read_as_under_sh_c(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.start(_start(1, "nosuchcmd"))
    agent.start(_start(2, "true\nif then"))
    assert wait_exit(agent, 1) == 127
    assert _log(tmp_path, 1) == "sh: 1: nosuchcmd: not found\n"
    # A command that does not parse runs nothing; sh's code for it, 2, as the agent reaped it.
    assert wait_exit(agent, 2) == 2
    assert _log(tmp_path, 2) == 'sh: 2: Syntax error: "then" unexpected\n'


def test_a_stop_reaches_the_command_and_the_wrapper_waits_for_its_end(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.start(_start(1, "sleep 30"))
    agent.start(_start(2, "trap 'sleep 0.3; echo cleaned; exit 5' TERM; sleep 30 & wait"))
    time.sleep(0.3)
    for replica in (1, 2):
        agent.stop({"replica": replica, "grace_seconds": 10})
    assert wait_exit(agent, 1) == 128 + 15  # sh's convention for a command ended by SIGTERM
    assert wait_exit(agent, 2) == 5
    assert _log(tmp_path, 2) == "cleaned\n"
    assert (tmp_path / "replicas" / "2.exit").read_text() == "5\n"


def test_an_agent_restarted_while_the_job_runs_reads_its_code(tmp_path: Path) -> None:
    first = _agent(tmp_path)
    first.start(_start(1, "sleep 0.5; exit 4"))
    restarted = _agent(tmp_path)  # adopts it: not its child, so it learns the end from /proc
    assert restarted.held[1].exit_code is None and 1 not in restarted.children
    assert wait_exit(restarted, 1) == 4
    os.waitpid(first.held[1].pid, 0)  # the first agent's zombie, reaped for the test's tidiness


def test_the_command_starts_with_sigpipe_at_its_default(tmp_path: Path) -> None:
    # Python ignores SIGPIPE (and SIGXFSZ) in the agent; a job's `yes | head` must end by it as in a shell.
    agent = _agent(tmp_path)
    agent.start(_start(1, "sed -n 's/^SigIgn:\t//p' /proc/self/status; yes | head -n 1"))
    assert wait_exit(agent, 1) == 0
    ignored, head = _log(tmp_path, 1).splitlines()
    assert int(ignored, 16) & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0
    assert head == "y"


def test_the_state_and_exit_files_of_forgotten_replicas_are_used_again(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    for replica in (1, 2):
        agent.start(_start(replica, f"exit {replica}"))
    assert [wait_exit(agent, replica) for replica in (1, 2)] == [1, 2]
    agent.beat()  # reported; the console has them: forgotten
    replicas = tmp_path / "replicas"
    assert sorted(p.name for p in replicas.iterdir()) == [
        "1.exit.spare",
        "1.json.spare",
        "2.exit.spare",
        "2.json.spare",
    ]
    assert all(p.stat().st_size == 0 for p in replicas.iterdir())
    inodes = {p.stat().st_ino for p in replicas.iterdir()}
    agent.start(_start(3, "sleep 0.2; exit 6"))
    state, code = replicas / "3.json", replicas / "3.exit"
    assert {state.stat().st_ino, code.stat().st_ino} <= inodes  # renamed spares, no new files
    assert code.read_text() == ""  # no record until the wrapper writes one
    assert wait_exit(agent, 3) == 6
    assert len(list(replicas.glob("*.spare"))) == 2
    # A restarted agent finds the spares and adopts none of them as a replica.
    restarted = _agent(tmp_path)
    assert sorted(restarted.held) == [3] and len(restarted._spares.names) == 2


def test_descriptors_the_agent_inherited_do_not_reach_its_jobs() -> None:
    # posix_spawn passes every inheritable descriptor on, where Popen closed them; the agent's
    # command marks what its launcher left open close-on-exec first.
    probe = (
        "import os\n"
        "from gqc.replica_process import inherited_descriptors_closed_on_exec\n"
        "read, write = os.pipe()\n"
        "os.set_inheritable(write, True)\n"
        "inherited_descriptors_closed_on_exec()\n"
        "print(os.get_inheritable(write), os.get_inheritable(1))\n"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert shown.stdout == "False True\n"
