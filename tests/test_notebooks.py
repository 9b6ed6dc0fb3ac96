"""Every notebook runs top to bottom (small settings: GRAPHFORMER_QUICK=1)."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_the_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_attention_animation.ipynb", "02_sparse_patterns.ipynb",
                                           "03_universal_transformer.ipynb"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFORMER_QUICK", "1")
    monkeypatch.setenv("GRAPHFORMER_NOTEBOOK_DIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "stored with outputs"
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent.parent)}}).execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors
