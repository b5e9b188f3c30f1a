"""Children of the launcher die with it, even when it is killed with SIGKILL.

The launcher starts Redis, web, worker and beat each in its own session (so that Ctrl-C reaches
the launcher alone, which stops them in order). That also means nothing stops them if the
launcher itself is killed: a test harness that gave up waiting left whole consoles running
(uvicorn, a worker, beat and Redis, adopted by init). Linux's parent-death signal closes that
gap: the kernel sends the child SIGTERM when the thread that started it ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for Popen: ask the kernel for SIGTERM when the parent goes. A no-op where
    prctl does not exist (macOS); there the launcher's own stop is the only one."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
