"""Every notebook runs top to bottom (small settings: GRAPHFORMER_QUICK=1), shows every figure it
promises, and leaves no files in the repository."""

import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# what a tagged cell must show (tags are set by notebooks/make_notebooks.py)
PICTURES = {"figure": "image/png", "player": "text/html"}


def untracked_files() -> set[str]:
    proc = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True
    )
    return set(proc.stdout.splitlines()) if proc.returncode == 0 else set()


def test_the_notebooks_are_there_and_tag_their_figures():
    assert [p.name for p in NOTEBOOKS] == [
        "01_attention_animation.ipynb",
        "02_sparse_patterns.ipynb",
        "03_universal_transformer.ipynb",
        "04_tree_attention.ipynb",
    ]
    for path in NOTEBOOKS:
        tags = [t for cell in nbformat.read(path, as_version=4).cells for t in cell.metadata.get("tags", [])]
        assert len(tags) >= 2 and set(tags) <= set(PICTURES), path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_shows_its_figures(path, tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is needed to look for files left behind")
    monkeypatch.setenv("GRAPHFORMER_QUICK", "1")
    monkeypatch.delenv("GRAPHFORMER_NOTEBOOK_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' default work folder is in the temp dir
    before = untracked_files()
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "stored with outputs"
    # run from notebooks/, as JupyterLab does
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors
    for cell in code:
        for tag in set(cell.metadata.get("tags", [])) & set(PICTURES):
            shown = [o for o in cell.outputs if PICTURES[tag] in o.get("data", {})]
            assert shown, f"{path.name}: this cell showed no {PICTURES[tag]}:\n{cell.source}"
    assert (tmp_path / "graphformer-notebooks").is_dir()
    assert untracked_files() == before, "running the notebook left files in the repository"
