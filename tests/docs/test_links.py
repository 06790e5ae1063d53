"""Every link and file reference in the README, docs/ and the code's docstrings resolves inside the repository.

A newcomer from a fresh clone followed references to the team's design notes, files that never were in
the repository. Here: every Markdown link (and its #anchor, for a Markdown target) in the repository's
Markdown files must resolve, and every Markdown file a source file, script or config names must exist."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def tracked(*patterns: str) -> list[Path]:
    """Files git tracks or would track (not ignored), matching the patterns."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted({ROOT / p for p in out if (ROOT / p).is_file()})


def slug(heading: str) -> str:
    """The anchor mkdocs (toc's default slugify) and GitHub give a heading: lower case, punctuation dropped."""
    text = re.sub(r"`|\*\*|\*", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    found = {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}
    found |= set(re.findall(r"\{#([\w-]+)\}", text)) | set(re.findall(r"<a (?:name|id)=\"([\w-]+)\"", text))
    return found


MARKDOWN = tracked("*.md")


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_links_resolve(path):
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto:, ws: ...
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading with anchor #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"


SOURCES = tracked("*.py", "*.sh", "*.js", "*.html", "*.yaml", "*.yml", "*.toml", "*.cfg", "*.md", "Dockerfile*")


def test_every_named_markdown_file_exists():
    """`docs/protocol.md`, `clients/python/README.md`: any Markdown file named anywhere must exist."""
    missing = []
    for path in SOURCES:
        text = path.read_text(errors="replace")
        for name in set(MD_NAME.findall(text)):
            if "*" in name or name.startswith(("http", "www.")):
                continue
            candidates = [ROOT / name, path.parent / name, ROOT / "docs" / name]
            if not any(c.exists() for c in candidates):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, "references to Markdown files that are not in the repository:\n" + "\n".join(sorted(missing))
