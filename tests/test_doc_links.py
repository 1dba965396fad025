"""Every relative link in the README and docs/ resolves: the file exists, and an anchor names one of its headings
(GitHub's rule: lower case, punctuation dropped, spaces to hyphens, a repeat numbered). Links inside code are not
links."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(text: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def prose(path: Path) -> list[str]:
    """The file's lines outside fenced code."""
    out, fence = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append(line)
    return out


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose(path):
        m = re.match(r"^(#{1,6}) (.*)$", line)
        if m:
            s = slug(m.group(2))
            found.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return found


def broken_links(files: list[Path]) -> list[str]:
    bad = []
    for path in files:
        for line in prose(path):
            for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):  # a link inside inline code is code
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}: {target}"
                if not dest.exists():
                    bad.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    bad.append(f"{where} (no such heading)")
    return bad


def test_every_relative_link_in_the_readme_and_docs_resolves():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert broken_links(files) == []
