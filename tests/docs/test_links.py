"""Links that stay true: the site build fails on a link to a missing heading, and the Markdown
pages outside the site (the README, the examples' READMEs) link to files and headings that exist.

mkdocs checks the pages under docs/ (`test_docs.py` builds them with ``--strict``), but reports a
missing anchor only as INFO unless ``validation: anchors: warn`` turns it into a warning, which
``--strict`` makes fatal. The READMEs are read on GitHub, where nothing checks them, and GitHub
makes a heading's id its own way: "Recall at L = 4096" is ``recall-at-l--4096`` there (one hyphen
per space) and ``recall-at-l-4096`` on the site (runs of spaces and hyphens become one).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE_THE_SITE = [ROOT / "README.md"] + sorted((ROOT / "examples").glob("*/README.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)  # a code block's '# comment' is no heading


def build(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def two_page_site(folder: Path, anchor: str) -> Path:
    """A site with the project's link validation: page a links to ``anchor`` of page b."""
    validation = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["validation"]
    config = {"site_name": "links", "strict": True, "use_directory_urls": False, "validation": validation}
    (folder / "docs").mkdir(parents=True)
    (folder / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (folder / "docs" / "index.md").write_text(f"# A\n\nSee [b](b.md#{anchor}).\n")
    (folder / "docs" / "b.md").write_text("# B\n\n## Recall at L = 4096: a curriculum\n\nText.\n")
    return folder


def test_a_link_to_a_missing_heading_fails_the_strict_build(tmp_path):
    good = build(two_page_site(tmp_path / "good", "recall-at-l-4096-a-curriculum"))
    assert good.returncode == 0, good.stderr[-2000:]
    bad = build(two_page_site(tmp_path / "bad", "recall-at-l--4096-a-curriculum"))  # GitHub's id
    assert bad.returncode != 0
    assert "does not contain an anchor '#recall-at-l--4096-a-curriculum'" in bad.stderr


def github_anchors(text: str) -> set[str]:
    """The ids GitHub gives a Markdown text's headings: lower case, punctuation but hyphens
    dropped, each space a hyphen."""
    titles = HEADING.findall(FENCE.sub("", text))
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))) if ":" not in t]


@pytest.mark.parametrize("page", OUTSIDE_THE_SITE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_readme_links_to_files_and_headings_that_exist(page):
    assert github_anchors("## Recall at L = 4096: a `cls` node") == {"recall-at-l--4096-a-cls-node"}  # GitHub's rule
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in github_anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"
