"""The documentation site builds with warnings as errors (broken links, bad docstrings), every
public module has a reference page, and the pages show docstrings as Markdown."""

import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import graphformer

ROOT = Path(__file__).resolve().parents[2]
SPHINX_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):(?=`|<code)")
SPECIAL_TOKEN_AS_TAG = re.compile(r"<(?:pad|unk|s|/s)>")  # a docstring's <pad> outside backticks


def cli_page() -> str:
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render()


def public_modules() -> list[str]:
    """Every module a user may import: not a package's __init__, no part starting with '_'."""
    return sorted(
        m.name
        for m in pkgutil.walk_packages(graphformer.__path__, "graphformer.")
        if not m.ispkg and not any(part.startswith("_") for part in m.name.split("."))
    )


def test_every_public_module_has_a_reference_page():
    pages = [p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md")] + [cli_page()]
    documented = {m for page in pages for m in re.findall(r"^::: (\S+)", page, flags=re.M)}
    missing = [m for m in public_modules() if m not in documented]
    assert not missing, f"add '::: MODULE' to a page in docs/reference/ for: {', '.join(missing)}"
    assert "graphformer.vocab" in documented and "graphformer.viz.recording" in documented


def test_cli_page_is_generated_from_the_parser():
    page = cli_page()
    for command in ("train", "evaluate", "translate", "animate", "heatmap"):
        assert f"## graphformer {command}" in page
    assert "--viz-every" in page and "--scale {shared,per-head}" in page


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site


def test_docs_build_strictly(site):
    assert "graph_attention" in (site / "reference" / "attention.html").read_text()
    cli = (site / "reference" / "cli.html").read_text()
    assert "graphformer animate" in cli and "--viz-every" in cli


def test_reference_pages_render_markdown_not_sphinx(site):
    pages = {p.stem: p.read_text() for p in (site / "reference").glob("*.html")}
    assert len(pages) >= 8
    shown = {name: SPHINX_ROLE.findall(text) for name, text in pages.items()}
    assert not any(shown.values()), f"Sphinx roles shown literally: {shown}"
    swallowed = {name: SPECIAL_TOKEN_AS_TAG.findall(text) for name, text in pages.items()}
    assert not any(swallowed.values()), f"special tokens taken for HTML tags: {swallowed}"
    assert "&lt;pad&gt;" in pages["evaluation"]  # the loss (graphformer.evaluation.loss) names <pad>


def test_site_reads_from_disk(site):
    """Opened as files (no server), every link of every page names a file that is there."""
    missing = []
    for page in site.rglob("*.html"):
        if page.name == "404.html":  # only a server shows it; its links start at the server root
            continue
        for url in re.findall(r'(?:href|src)="([^"#?]+)', page.read_text()):
            if ":" not in url and not url.startswith("/") and not (page.parent / url).is_file():
                missing.append(f"{page.relative_to(site)}: {url}")
    assert not missing, missing[:10]
