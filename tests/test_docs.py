"""The README is a newcomer's map of docs/: every link it and the documents give to a file or a
section of this repository must lead somewhere, as GitHub renders them (a section's anchor is its
heading, lower-cased, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(document: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.name)
def test_every_link_leads_to_a_file_and_section_that_exist(document: Path) -> None:
    broken = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # another site
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no such section in {linked.name}")
    assert not broken, broken


def test_the_readme_stays_a_map() -> None:
    """Everything else lives in docs/ by topic; the README says what this is, how to run it and
    where to read on."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    linked = set(re.findall(r"\(docs/([\w-]+\.md)", readme))
    assert linked == {d.name for d in DOCUMENTS if d.parent == ROOT / "docs"}
