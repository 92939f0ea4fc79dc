"""The documentation holds together: README.md stays short, and every relative link and image in
README.md and docs/*.md points to a file that exists (and a ``#anchor`` to a heading of its target,
as GitHub makes them). No browser, no network: the Markdown is read as text."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

# [text](target) and ![alt](target), the target up to the first space or closing parenthesis.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code spans removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters of any script, digits and _
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; repeated headings get -1, -2, ... as on GitHub."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in _prose(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    return [match.group(1) for line in _prose(path.read_text(encoding="utf-8")) for match in _LINK.finditer(line)]


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` that lead nowhere, each with the reason."""
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no file {_shown(resolved)}")
            continue
        if anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {_shown(resolved)}")
    return broken


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(page):
    assert broken_links(page) == []


def test_the_readme_links_somewhere():
    assert len(links(ROOT / "README.md")) >= 10


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    assert [page.name for page in PAGES[1:] if page.resolve() not in linked] == []


def test_no_lab_notebook_wording():
    wording = re.compile(r"\btoday\b|this round|previous round|first round|\bseed 0\d|yesterday", re.IGNORECASE)
    found = [f"{page.name}:{n}: {line.strip()}" for page in PAGES
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) if wording.search(line)]
    assert found == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Choices we made (and why)", "choices-we-made-and-why"),
        ("Switching health off, or thinning it", "switching-health-off-or-thinning-it"),
        ("Where you train: Lightning, S3", "where-you-train-lightning-s3"),
        ("A frame's header", "a-frames-header"),
        ("The `FrameHeader`", "the-frameheader"),
        ("Remote logdirs (S3)", "remote-logdirs-s3"),
    ],
)
def test_slugs_are_githubs(heading, anchor):
    assert slug(heading) == anchor


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Here\n", encoding="utf-8")
    page.write_text(
        "# Top\n[ok](other.md#here) [self](#top) [gone](missing.md) [bad anchor](other.md#there)\n"
        "```\n[in code](nowhere.md)\n```\n[web](https://example.com/x)\n",
        encoding="utf-8",
    )
    assert [entry.split(":")[0] for entry in broken_links(page)] == ["missing.md", "other.md#there"]
