"""The documentation's page lists, counts and generated sections cannot drift from what exists.

index.md is the one page list; mkdocs.yml's nav puts every page in one of four sections; the
README states the count; the options reference is generated from the parsers; the quick start's
excerpts state the number of tests the default profile runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.plugin._reference import SECTION, reference_markdown

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SECTIONS = ["Use", "Reference", "Evidence", "Develop"]


def pages() -> set[str]:
    return {p.name for p in DOCS.glob("*.md")}


def nav() -> dict[str, list[str]]:
    """mkdocs.yml's nav as section -> page files. The file holds Python tags PyYAML would need
    loaders for; the nav is read with a pattern, as its shape is fixed."""
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text[text.index("\nnav:\n") :].splitlines()[2:]:
        if not line.startswith("  "):
            break
        if m := re.fullmatch(r"  - (\w+):", line):
            current = m.group(1)
            sections[current] = []
        elif m := re.fullmatch(r"      - [^:]+: (\S+\.md)", line):
            sections[current].append(m.group(1))
        else:
            pytest.fail(f"mkdocs.yml: a nav line of no known shape: {line!r}")
    return sections


def test_the_nav_has_four_sections_and_every_page_once() -> None:
    sections = nav()
    assert list(sections) == SECTIONS
    listed = [p for files in sections.values() for p in files]
    assert sorted(listed) == sorted(pages()), "every docs/*.md page once in mkdocs.yml's nav"


def test_index_is_the_one_page_list_and_matches_the_nav() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\w+) \| \[[^\]]+\]\(([\w-]+\.md)\) \|", index, re.M)
    assert {p for _, p in rows} | {"index.md"} == pages(), "index.md's page list names every page"
    by_section = {s: [p for sec, p in rows if sec == s] for s in SECTIONS}
    assert by_section == {s: [p for p in files if p != "index.md"] for s, files in nav().items()}
    # No other page lists the pages: a second list is the one that goes stale.
    for page in [*DOCS.glob("*.md"), REPO / "README.md"]:
        if page.name != "index.md":
            links = set(re.findall(r"\]\((?:docs/)?([\w-]+\.md)", page.read_text(encoding="utf-8")))
            assert len(links) < len(pages()) // 2, f"{page.name} links {len(links)} pages: a page list"


def test_the_readme_states_the_page_count() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stated = re.search(r"(\d+) pages in four sections", readme)
    assert stated and int(stated.group(1)) == len(pages())


def test_the_docs_options_reference_is_the_generated_one() -> None:
    assert SECTION.read(REPO / SECTION.page) == reference_markdown(), (
        f"{SECTION.page}'s options reference differs from the parsers; regenerate it with: {SECTION.regenerate}"
    )


def test_the_quick_starts_test_count_is_what_the_default_profile_collects() -> None:
    """The excerpts of the first quick-start command end with pytest's own count line."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "perf_tests", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    collected = int(re.search(r"(\d+) tests? collected", out).group(1))  # type: ignore[union-attr]
    for page in (REPO / "README.md", DOCS / "getting-started.md"):
        text = page.read_text(encoding="utf-8")
        first = re.search(r"=+ (\d+) passed, (\d+) skipped in [\d.]+s", text)
        assert first, f"{page.name}: no pytest count line in the quick start's excerpt"
        assert int(first.group(1)) + int(first.group(2)) == collected, page.name
