"""Where `gqc login` keeps the console's address and the token: one JSON file, readable only by its owner."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import click

CONFIG_DIR_VARIABLE = "GQC_CONFIG_DIR"


@dataclass(frozen=True, slots=True)
class Credentials:
    url: str
    username: str
    token: str


def config_path() -> Path:
    """The file under the user's config dir (XDG on Linux), or under $GQC_CONFIG_DIR when set."""
    directory = os.environ.get(CONFIG_DIR_VARIABLE) or click.get_app_dir("gqc")
    return Path(directory) / "config.json"


def save(credentials: Credentials) -> Path:
    """Write the credentials with mode 0600 from the first byte: a token is a password."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staged = path.with_suffix(".tmp")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        json.dump(asdict(credentials), stream)
    os.chmod(staged, 0o600)  # an existing file keeps its old mode through os.open
    staged.replace(path)
    return path


def load() -> Credentials | None:
    """The stored credentials, or None when the user has not signed in (or the file is unreadable)."""
    path = config_path()
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        return Credentials(url=str(stored["url"]), username=str(stored["username"]), token=str(stored["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def forget() -> bool:
    """Remove the stored credentials; whether there were any."""
    try:
        config_path().unlink()
    except FileNotFoundError:
        return False
    return True
