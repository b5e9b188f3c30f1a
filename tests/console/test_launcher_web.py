"""WEB_CONCURRENCY: how many web processes the launcher's uvicorn serves the port with."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import psutil
import pytest
from websockets.asyncio.client import connect as websocket_connect

from console.launcher import WEB_CONCURRENCY_DEFAULT, LaunchError, _process_table, web_concurrency


def test_one_web_process_by_default_without_a_workers_flag() -> None:
    assert web_concurrency({}) == WEB_CONCURRENCY_DEFAULT == 1
    assert "--workers" not in _process_table(8130, "127.0.0.1")["web"]


def test_several_web_processes_are_uvicorn_workers_on_the_same_port() -> None:
    assert web_concurrency({"WEB_CONCURRENCY": " 4 "}) == 4
    web = _process_table(8130, "127.0.0.1", 4)["web"]
    assert web[web.index("--workers") + 1] == "4" and web[web.index("--port") + 1] == "8130"


@pytest.mark.parametrize("raw", ["0", "17", "two", "-1", "1.5"])
def test_a_bad_web_concurrency_is_refused_naming_the_variable_and_the_range(raw: str) -> None:
    with pytest.raises(LaunchError, match=rf"WEB_CONCURRENCY must be a whole number from 1 to 16 .*'{raw}'"):
        web_concurrency({"WEB_CONCURRENCY": raw})


# --- several web processes, for real: the websockets each process serves get every change ----------------


def _web_workers(launcher_pid: int) -> list[psutil.Process]:
    """uvicorn's worker processes (children of its manager), not the manager itself."""
    found = []
    for child in psutil.Process(launcher_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            parent = child.parent()
            # Its other child is multiprocessing's resource tracker.
            if (
                parent is not None
                and "uvicorn" in " ".join(parent.cmdline())
                and "spawn_main" in " ".join(child.cmdline())
            ):
                found.append(child)
    return found


def _serving_worker(workers: list[psutil.Process], client_port: int) -> int | None:
    for worker in workers:
        with contextlib.suppress(psutil.Error):
            if any(c.raddr and c.raddr.port == client_port for c in worker.net_connections(kind="tcp")):
                return int(worker.pid)
    return None


def _signed_in(url: str) -> tuple[str, str]:
    """The demo admin's session cookie (for the websockets) and API token (for the change)."""
    with httpx.Client(base_url=url, timeout=30) as web:
        web.get("/login/")
        signed = web.post(
            "/login/",
            data={"username": "admin", "password": "admin-demo", "csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": f"{url}/login/"},
        )
        assert signed.status_code in (200, 302), signed.text[:500]
        session = web.cookies["sessionid"]
        token = web.post("/api/v1/auth/token/", json={"username": "admin", "password": "admin-demo"}).json()["token"]
    return session, token


@pytest.mark.timeout(240)
def test_websockets_on_every_web_process_get_a_change_made_through_another(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.console_process import running_console

    monkeypatch.setenv("WEB_CONCURRENCY", "2")
    monkeypatch.setenv("CONSOLE_DEMO", "1")
    with running_console(port=8133) as console:
        workers = _web_workers(console.process.pid)
        assert len(workers) == 2, [w.cmdline() for w in workers]
        session, token = _signed_in(console.url)
        headers = {"Authorization": f"Token {token}"}
        running = httpx.get(f"{console.url}/api/v1/jobs/?state=running", headers=headers, timeout=30).json()
        job = running["results"][0]["id"]

        async def scenario() -> None:
            sockets: dict[int, list[Any]] = {}
            opened = []
            # The kernel hands connections to whichever process accepts first: open until both serve some.
            for _attempt in range(40):
                socket = await websocket_connect(
                    console.url.replace("http", "ws") + "/ws/live/",
                    additional_headers={"Cookie": f"sessionid={session}", "Origin": console.url},
                )
                opened.append(socket)
                pid = _serving_worker(workers, socket.local_address[1])
                if pid is not None:
                    sockets.setdefault(pid, []).append(socket)
                if len(sockets) == 2:
                    break
            try:
                assert len(sockets) == 2, "every connection went to one web process"
                subscribers = [group[0] for group in sockets.values()]
                for socket in subscribers:
                    await socket.send(json.dumps({"subscribe": [f"job:{job}"]}))
                    reply = json.loads(await asyncio.wait_for(socket.recv(), 10))
                    assert reply["subscribed"] == [f"job:{job}"], reply
                cancelled = await asyncio.to_thread(
                    httpx.post, f"{console.url}/api/v1/jobs/{job}/cancel/", json={}, headers=headers, timeout=30
                )
                assert cancelled.status_code == 200, cancelled.text
                for socket in subscribers:
                    while (message := json.loads(await asyncio.wait_for(socket.recv(), 15)))["type"] != "change":
                        pass
                    assert message["topic"] == f"job:{job}"
            finally:
                for socket in opened:
                    await socket.close()

        asyncio.run(scenario())
