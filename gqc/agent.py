"""The node agent (AGENT.md): runs on each GPU host, makes the console's desired state so, reports back.

This module is its command, `python -m gqc.agent` (`manage.py agent` in a checkout is the same
program). The agent itself, and what it keeps in its state directory, is gqc/node_agent.py; the
GPUs it reads, gqc/gpus.py; its HTTP(S) to the console, gqc/console_link.py (the standard
library's, httpx behind a proxy). All are plain modules on purpose: the agent needs no database,
no Redis and no Django, only HTTP(S) to the console and, on a real host, NVML (nvidia-ml-py), so
it installs with the gqc client (`pip install .`) on a GPU host that has no checkout. The names
the launcher, the checks and the tests use are imported here too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gqc.gpus import FakeGpus as FakeGpus
from gqc.gpus import Gpus as Gpus
from gqc.gpus import NvmlGpus as NvmlGpus
from gqc.gpus import NvmlUnavailable as NvmlUnavailable
from gqc.node_agent import BEAT_JITTER as BEAT_JITTER
from gqc.node_agent import IDENTITY_FILE as IDENTITY_FILE
from gqc.node_agent import LOG_LINES_PER_BEAT as LOG_LINES_PER_BEAT
from gqc.node_agent import SET_ASIDE as SET_ASIDE
from gqc.node_agent import Agent as Agent
from gqc.node_agent import beat_delay as beat_delay
from gqc.replica_process import inherited_descriptors_closed_on_exec
from gqc.replicas import _alive as _alive
from gqc.replicas import _start_time as _start_time


def command_line(*, server: str, node: str, token_file: Path, state_dir: Path, fake_gpus: int | None) -> list[str]:
    """How to start an agent from Python (the launcher's local agent, the checks, the tests):
    `fake_gpus` stand-ins, or (None) the host's GPUs through NVML."""
    stand_ins = ["--fake-gpus", str(fake_gpus)] if fake_gpus is not None else []
    return [
        sys.executable,
        "-m",
        "gqc.agent",
        "--server",
        server,
        "--node",
        node,
        "--token-file",
        str(token_file),
        *stand_ins,
        "--state-dir",
        str(state_dir),
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent", description="The GPU Quota Console node agent (AGENT.md).")
    parser.add_argument("--server", required=True, help="The console's URL, e.g. https://console.example.org")
    parser.add_argument("--node", required=True, help="This host's node name in the inventory.")
    parser.add_argument("--token-file", required=True, type=Path, help="A file holding the node token.")
    parser.add_argument("--fake-gpus", type=int, default=None, help="N stand-in GPUs instead of NVML.")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="PIDs and logs (default: ~/.local/state/gqc-agent/NODE)."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s agent %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # behind a proxy: one line per beat drowns what matters
    token = arguments.token_file.read_text().strip()
    state_dir = arguments.state_dir or Path.home() / ".local" / "state" / "gqc-agent" / arguments.node
    try:
        gpus: Gpus = FakeGpus(arguments.fake_gpus, arguments.node) if arguments.fake_gpus is not None else NvmlGpus()
    except NvmlUnavailable as error:
        print(f"agent: {error}.", file=sys.stderr)
        return 2
    inherited_descriptors_closed_on_exec()  # the jobs it starts get none of the launcher's descriptors
    Agent(server=arguments.server, node=arguments.node, token=token, gpus=gpus, state_dir=state_dir).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
