"""WEB_CONCURRENCY: how many web processes the launcher's uvicorn serves the port with."""

from __future__ import annotations

import pytest

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
