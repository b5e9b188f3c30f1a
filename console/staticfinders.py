"""plotly.js from the installed `plotly` package, as the static file `plotly/plotly.min.js`.

The console works with no internet and has no Node build (CONSOLE.md), so the bundle comes
from the pinned Python package. A finder, rather than a copy in `static/`, keeps one source of
truth: upgrading the pin upgrades the file, `collectstatic` picks it up for whitenoise, and the
repository carries no 5 MB vendored file. Only the bundle is exposed, not the package's other
data (datasets, templates, the Jupyter widget bundle).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, overload

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage
from django.core.files.storage import FileSystemStorage

PLOTLY_BUNDLE = "plotly/plotly.min.js"


def bundle_path() -> Path:
    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The storage's location is the package's data folder; `prefix` maps it under plotly/.
        self.storage = FileSystemStorage(location=str(bundle_path().parent))
        self.storage.prefix = "plotly"  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return []

    @overload
    def find(self, path: str, find_all: Literal[False] = False) -> str | None: ...
    @overload
    def find(self, path: str, find_all: Literal[True]) -> list[str]: ...
    def find(self, path: str, find_all: bool = False) -> str | list[str] | None:
        if path != PLOTLY_BUNDLE:
            return [] if find_all else None
        found = str(bundle_path())
        return [found] if find_all else found

    def list(self, ignore_patterns: Iterable[str] | None) -> Iterator[tuple[str, FileSystemStorage]]:
        yield bundle_path().name, self.storage
