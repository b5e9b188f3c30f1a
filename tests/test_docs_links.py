"""README.md and docs/ link only to files inside the repository, and those files exist: a clone
carries everything a reader is sent to (the contract beside the checkout, ../shared/, is not)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# [text](target) and bare `../shared/…` mentions, which read like paths even when not linked.
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE_PATH = re.compile(r"(?<![\w/.])(?:\.\./)+shared/|/work/shared/")


def local_targets(page: Path) -> list[str]:
    targets = []
    for target in MARKDOWN_LINK.findall(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s):, mailto:, in-page anchors
        targets.append(target.split("#", 1)[0])
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_stays_inside_the_repository_and_exists(page: Path) -> None:
    broken = []
    for target in local_targets(page):
        resolved = (ROOT / target.lstrip("/")) if target.startswith("/") else (page.parent / target)
        resolved = resolved.resolve()
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{target} (no such file)")
    assert broken == [], f"{page.relative_to(ROOT)} links to {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_page_sends_the_reader_to_the_contract_outside_the_clone(page: Path) -> None:
    mentions = [line.strip() for line in page.read_text().splitlines() if OUTSIDE_PATH.search(line)]
    assert mentions == [], f"{page.relative_to(ROOT)} points outside the repository: {mentions}"


def test_the_link_check_catches_what_it_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[a](../shared/DESIGN.md) [b](https://example.org) [c](#top) [d](docs/x.md#part)")
    assert local_targets(page) == ["../shared/DESIGN.md", "docs/x.md"]
    assert OUTSIDE_PATH.search("see `../shared/API.md`")
