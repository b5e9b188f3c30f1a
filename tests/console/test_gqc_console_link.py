"""The node agent's link to its console (gqc/console_link.py): JSON over one kept-alive connection
of the standard library, against a real HTTP server on 127.0.0.1 here (the live console in
tests/scheduling/test_agent_live.py); httpx only behind a proxy."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gqc.agent import Agent, FakeGpus
from gqc.console_link import ConsoleUnreachable, HttpxLink, PlainLink, certificate_roots, open_link


class Console:
    """What the server saw: each request's path, headers and body, and how many connections."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.connections = 0
        self.status = 200
        self.answer: bytes = b'{"starts": [], "stops": [], "heartbeat_seconds": 2}'
        self.close_after_answer = False  # drop the connection without saying so (an idle timeout)


@pytest.fixture
def console() -> Iterator[tuple[Console, str]]:
    seen = Console()

    class Endpoint(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            seen.connections += 1

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.requests.append((self.path, dict(self.headers), body))
            self.send_response(seen.status)
            self.send_header("Content-Length", str(len(seen.answer)))
            self.end_headers()
            self.wfile.write(seen.answer)
            if seen.close_after_answer:
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield seen, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_posts_json_with_the_node_token_and_keeps_one_connection(console: tuple[Console, str]) -> None:
    seen, url = console
    link = PlainLink(url + "/console/", "secret")
    assert link.post("/api/v1/agent/heartbeat/", {"node": "n1", "processes": []}) == {
        "starts": [],
        "stops": [],
        "heartbeat_seconds": 2,
    }
    link.post("/api/v1/agent/heartbeat/", {"node": "n1"})
    (path, headers, body), _second = seen.requests
    assert path == "/console/api/v1/agent/heartbeat/"  # a console under a path prefix, as httpx's base_url
    assert headers["Authorization"] == "Node secret"
    assert headers["Content-Type"] == "application/json"
    assert body == {"node": "n1", "processes": []}
    assert seen.connections == 1


def test_a_connection_the_console_dropped_is_opened_again(console: tuple[Console, str]) -> None:
    seen, url = console
    seen.close_after_answer = True
    link = PlainLink(url, "t")
    for beat in range(3):
        link.post("/api/v1/agent/heartbeat/", {"beat": beat})
    assert [body["beat"] for _path, _headers, body in seen.requests] == [0, 1, 2]  # each sent once
    assert seen.connections == 3


def test_a_refusal_or_no_console_is_one_sentence_and_not_json_is_a_value_error(console: tuple[Console, str]) -> None:
    seen, url = console
    seen.status = 401
    with pytest.raises(ConsoleUnreachable, match="401 Unauthorized"):
        PlainLink(url, "t").post("/api/v1/agent/heartbeat/", {})
    seen.status, seen.answer = 200, b"<html>a proxy's page</html>"
    with pytest.raises(ValueError):
        PlainLink(url, "t").post("/api/v1/agent/heartbeat/", {})
    with pytest.raises(ConsoleUnreachable, match=r"127\.0\.0\.1:9"):
        PlainLink("http://127.0.0.1:9", "t", timeout=2).post("/api/v1/agent/heartbeat/", {})


def test_the_agent_registers_and_beats_through_its_own_link(console: tuple[Console, str], tmp_path: Path) -> None:
    seen, url = console
    seen.answer = b'{"heartbeat_seconds": 2, "mismatch": [], "starts": [], "stops": []}'
    agent = Agent(server=url, node="n1", token="t", gpus=FakeGpus(2, "n1"), state_dir=tmp_path)
    assert isinstance(agent.link, PlainLink)
    agent.register()
    agent.beat()
    assert [path for path, _headers, _body in seen.requests] == ["/api/v1/agent/register/", "/api/v1/agent/heartbeat/"]
    assert seen.requests[1][2]["node"] == "n1" and len(seen.requests[1][2]["samples"]) == 2


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
def test_behind_a_proxy_the_agent_goes_through_httpx(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert isinstance(open_link("https://console.example.org", "t"), PlainLink)  # NO_PROXY alone routes nothing
    monkeypatch.setenv(variable, "http://proxy.example.org:3128")
    assert isinstance(open_link("https://console.example.org", "t"), HttpxLink)


def test_the_certificate_roots_are_httpxs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import certifi

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert certificate_roots().get_ca_certs() != []  # certifi's bundle, loaded up front
    with pytest.raises(FileNotFoundError):  # the variable is what is read
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
        certificate_roots()
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    assert len(certificate_roots().get_ca_certs()) == len(
        __import__("ssl").create_default_context(cafile=certifi.where()).get_ca_certs()
    )
