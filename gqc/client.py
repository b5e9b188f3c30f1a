"""The REST API over httpx: one client per command, errors turned into the API's own sentences."""

from __future__ import annotations

from typing import Any

import httpx

API_PREFIX = "/api/v1/"
TIMEOUT_SECONDS = 30.0
PAGE_SIZE = 200


class ApiError(Exception):
    """A refusal or a failure, carrying the sentence to print and the exit code for scripts."""

    def __init__(self, message: str, *, exit_code: int, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.status = status


# Exit codes a script can branch on (docs/cli.md).
EXIT_REFUSED = 1  # the API refused the request (400, 403, 409…)
EXIT_USAGE = 2  # click's own code for bad flags
EXIT_SIGNED_OUT = 3  # no stored token, or the token was refused (401)
EXIT_NOT_FOUND = 4  # no such object, or one this user may not see (404)
EXIT_UNREACHABLE = 5  # no answer from the console, or a 5xx
EXIT_WAITS = 10  # `submit --dry-run`: valid, but the job would wait


def error_sentence(answer: Any) -> str:
    """Flatten DRF's error shapes ({"detail": …}, {"field": ["…"]}, ["…"]) into one line per error."""
    if isinstance(answer, dict):
        if set(answer) == {"detail"}:
            return str(answer["detail"])
        lines = []
        for field, messages in answer.items():
            text = "; ".join(str(message) for message in messages) if isinstance(messages, list) else str(messages)
            lines.append(text if field in {"non_field_errors", "detail"} else f"{field}: {text}")
        return "\n".join(lines)
    if isinstance(answer, list):
        return "\n".join(str(message) for message in answer)
    return str(answer)


class ConsoleClient:
    """Calls under /api/v1/ of one console, signed in with a token (or not, for `login`)."""

    def __init__(self, url: str, token: str | None = None, *, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX, headers=headers, timeout=TIMEOUT_SECONDS, transport=transport
        )

    def __enter__(self) -> ConsoleClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        return self._call("GET", path, params={key: value for key, value in params.items() if value is not None})

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call("POST", path, json=body or {})

    def get_all(self, path: str, **params: Any) -> list[Any]:
        """Every item of a paginated list, page by page (the API caps a page at 1,000)."""
        items: list[Any] = []
        offset = 0
        while True:
            page = self.get(path, limit=PAGE_SIZE, offset=offset, **params)
            items.extend(page["results"])
            offset += len(page["results"])
            if not page.get("next") or not page["results"]:
                return items

    def _call(self, method: str, path: str, **request: Any) -> Any:
        try:
            response = self._http.request(method, path, **request)
        except httpx.HTTPError as failure:
            raise ApiError(f"cannot reach the console at {self.url}: {failure}", exit_code=EXIT_UNREACHABLE) from None
        if response.status_code >= 500:
            raise ApiError(
                f"the console answered {response.status_code}; try again, or ask its operator",
                exit_code=EXIT_UNREACHABLE,
                status=response.status_code,
            )
        try:
            answer = response.json() if response.content else None
        except ValueError:
            raise ApiError(
                f"{self.url} answered {response.status_code} with something that is not the console's JSON",
                exit_code=EXIT_UNREACHABLE,
                status=response.status_code,
            ) from None
        if response.status_code == 401:
            raise ApiError(
                f"{error_sentence(answer)} (sign in again with `gqc login {self.url}`)",
                exit_code=EXIT_SIGNED_OUT,
                status=401,
            )
        if response.status_code == 404:
            raise ApiError(error_sentence(answer), exit_code=EXIT_NOT_FOUND, status=404)
        if response.status_code >= 400:
            raise ApiError(error_sentence(answer), exit_code=EXIT_REFUSED, status=response.status_code)
        return answer
