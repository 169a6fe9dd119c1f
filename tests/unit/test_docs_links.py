"""The README and docs/ link only to files inside the repository, and every `#anchor` they
use names a heading that exists (as GitHub renders it). A renamed heading or a moved file
breaks a reader's path silently otherwise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) outside code spans; images too. Code blocks are dropped before matching.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and
    underscores kept), spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_stays_inside_the_repository_and_finds_its_anchor(page: Path) -> None:
    problems = []
    for target in links(page):
        if re.match(r"^[a-z]+:", target):
            if not target.startswith("mailto:"):
                problems.append(f"{target}: links outside the repository")
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            continue
        if not dest.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not problems, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_slug_matches_githubs_rendering() -> None:
    assert slug("Key order (`spec.ordering: Key`)") == "key-order-specordering-key"
    assert slug("Status, conditions and Events") == "status-conditions-and-events"
    assert slug("`antidote inspect <consumer>`") == "antidote-inspect-consumer"
