"""The README and docs/ link to each other: every relative link, anchor and named section still exists.

The README is the first page and docs/ holds the reference (issue 24); text moved between them
must not leave a link, an anchor or a "see README 'X'" in the code pointing at nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def _headings(text: str) -> list[str]:
    headings, in_code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := re.match(r"#{1,6} (.*)", line)):
            headings.append(match.group(1).strip())
    return headings


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_every_relative_link_and_anchor_exists() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif (
                anchor
                and dest.suffix == ".md"
                and anchor not in {_anchor(h) for h in _headings(dest.read_text(encoding="utf-8"))}
            ):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_sections_the_code_names_exist() -> None:
    """`see README 'Onboard your own model'` and `docs/kernel_time.md` in a message or docstring lead somewhere."""
    readme = [h.lower() for h in _headings((REPO / "README.md").read_text(encoding="utf-8"))]
    missing = []
    for source in (REPO / "pytest_sme2").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        for section in re.findall(r"README['’]?s? ['\"]([^'\"]+)['\"]", text):
            if not any(h.startswith(section.lower()) for h in readme):
                missing.append(f"{source.relative_to(REPO)}: README {section!r}")
        for doc in re.findall(r"\bdocs/(\w+\.md)\b", text):
            if not (REPO / "docs" / doc).exists():
                missing.append(f"{source.relative_to(REPO)}: docs/{doc}")
    assert not missing, missing
