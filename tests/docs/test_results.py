"""docs/results.md stays a page of current headline tables, each with its command, and the
pointers between it and the pages that hold the details (`FILE`, section "NAME") stay true."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results.md"
MAX_CHARS = 25_000
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# `examples/copy/README.md`, section "Measured: decoding speed" / `docs/results.md` ("Decoding")
POINTER = re.compile(r'`((?:docs|examples)/[\w./-]+\.md)`(?:, section | \(|, | )"([^"]+)"')
# a command given in the section: a bash block, or a code span that runs something
COMMAND = re.compile(r"```bash|`(?:python|bash|graphformer|\.venv[\w-]*/bin/python) [^`]+`")


def sections(text: str) -> dict[str, str]:
    """A page's '## ' sections by heading (code blocks stay in, they hold the commands)."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def headings(path: Path) -> list[str]:
    return re.findall(r"^#{1,6} (.+?)\s*$", FENCE.sub("", path.read_text(encoding="utf-8")), flags=re.M)


def test_results_stay_within_their_length():
    size = len(RESULTS.read_text(encoding="utf-8"))
    assert size <= MAX_CHARS, (
        f"docs/results.md has {size} characters, at most {MAX_CHARS}: keep the headline tables there and "
        "move per-run detail, history and method to the example README or how-to page it belongs to"
    )


def test_every_table_of_results_comes_with_its_command():
    """A section with a table gives the command that makes it, or points to the page that does."""
    bare = []
    for heading, body in sections(RESULTS.read_text(encoding="utf-8")).items():
        if "\n|---" not in body or COMMAND.search(body):
            continue
        pointed = [ROOT / path for path, _ in POINTER.findall(" ".join(body.split()))]
        if not any(p.is_file() and "```bash" in p.read_text(encoding="utf-8") for p in pointed):
            bare.append(heading)
    assert len(sections(RESULTS.read_text(encoding="utf-8"))) >= 10
    assert not bare, f"tables without a command in docs/results.md: {bare}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_pointer_to_a_section_names_a_heading_of_that_page(page):
    text = " ".join(FENCE.sub("", page.read_text(encoding="utf-8")).split())  # pointers wrap across lines
    wrong = []
    for path, name in POINTER.findall(text):
        target = ROOT / path
        if not target.is_file():
            wrong.append(f"{path}: no such file")
        elif not any(h.startswith(name) for h in headings(target)):
            wrong.append(f'{path} has no section "{name}"')
    assert not wrong, f"{page.relative_to(ROOT)}: {wrong}"


def test_the_pointer_pattern_reads_the_forms_the_pages_use():
    found = POINTER.findall(
        '`examples/a/README.md`, section "One: two" and (`docs/results.md`, "Decoding") or `docs/x.md` ("Recall")'
    )
    assert found == [("examples/a/README.md", "One: two"), ("docs/results.md", "Decoding"), ("docs/x.md", "Recall")]
