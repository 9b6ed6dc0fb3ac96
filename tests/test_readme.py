"""The README's Python examples run as written (a user copies them first)."""
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), namespace)
    if "log_probs" in namespace:  # the block says what shape it returns
        assert tuple(namespace["log_probs"].shape) == (5, 16)
        assert len(namespace["hyps"]) == 1


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2
