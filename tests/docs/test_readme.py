"""The Python examples of the README and the docs pages run as written (a user copies them first),
and the defaults they state in words are the code's."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
README = (ROOT / "README.md").read_text(encoding="utf-8")
TEXTS = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in PAGES}
BLOCKS = [(name, block) for name, text in TEXTS.items() for block in re.findall(r"```python\n(.*?)```", text, re.S)]
ALL_TEXT = " ".join(" ".join(text.split()) for text in TEXTS.values())  # sentences wrap across lines


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    name, block = BLOCKS[index]
    exec(compile(block, f"{name} python block {index}", "exec"), namespace)
    if "log_probs" in namespace:  # the block says what shape it returns
        assert tuple(namespace["log_probs"].shape) == (5, 16)
        assert len(namespace["hyps"]) == 1


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2 and "```python" in README


def test_the_defaults_the_readme_states_are_the_codes():
    """The README writes some defaults out in words; they must be the ones the options have."""
    from graphformer.data.batching import CHUNK_BATCHES
    from graphformer.model.config import ModelConfig
    from graphformer.training.config import DecodeConfig, TrainConfig
    from graphformer.viz.binned import MAX_BINS, MAX_TOKEN_ROWS
    from graphformer.viz.recording import MAX_RECORDED_WEIGHTS

    text = ALL_TEXT
    model = re.search(r"\(defaults: (\d+) layers, d_model (\d+), (\d+) heads, d_ff (\d+), (pre|post)-norm", text)
    defaults = ModelConfig.defaults()
    assert model and tuple(int(x) for x in model.groups()[:4]) == tuple(
        defaults[name] for name in ("layers", "d_model", "heads", "d_ff")
    )
    assert (model.group(5) == "pre") == defaults["norm_first"]
    assert int(re.search(r"`--epochs` \(default (\d+)\)", text).group(1)) == TrainConfig.defaults()["epochs"]
    beam, alpha = re.search(r"decode with beam (\d+) and GNMT length penalty ([\d.]+) by default", text).groups()
    assert (int(beam), float(alpha)) == (DecodeConfig().beam, DecodeConfig().alpha)
    assert int(re.search(r"runs of lines \((\d+) batches' worth", text).group(1)) == CHUNK_BATCHES
    assert int(re.search(r"recording holds at most ([\d,]+) weights", text).group(1).replace(",", "")) == (
        MAX_RECORDED_WEIGHTS
    )
    blocks = re.search(r"more than (\d+) tokens a side is drawn in blocks: at most (\d+) runs", text)
    assert blocks and tuple(map(int, blocks.groups())) == (MAX_TOKEN_ROWS, MAX_BINS)


def test_the_multi30k_recipe_the_readme_states_is_the_recipe_file():
    """The README's one-line description of the CPU recipe is its file's (cpu.yaml)."""
    from graphformer.cli import read_config_file

    model, train = read_config_file(str(ROOT / "examples" / "multi30k" / "cpu.yaml"))
    text = " ".join(README.split())  # sentences wrap across lines
    stated = re.search(r"\(`examples/multi30k/cpu.sh`, (\d+) layers, d_model (\d+), (\d+) epochs", text)
    assert stated and tuple(int(x) for x in stated.groups()) == (model["layers"], model["d_model"], train["epochs"])


def test_the_make_targets_and_pythons_the_docs_name_are_the_makefiles():
    """A `make TARGET` in a page is a target of the Makefile, and the Python each stack is said to
    run on is the one its install target takes."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, flags=re.M))
    named = {t for text in TEXTS.values() for t in re.findall(r"(?:`|^)make ([a-z][\w-]*)", text, flags=re.M)}
    assert {"demo", "test", "test-all", "test-current"} <= named
    assert named <= targets, f"not in the Makefile: {sorted(named - targets)}"
    for stack, variable in (("reference", "PYTHON"), ("current", "PYTHON_CURRENT")):
        stated = set(re.findall(rf"{stack} stack: Python (3\.\d+)", ALL_TEXT))
        taken = re.search(rf"^{variable} \?=.*?python(3\.\d+)", makefile, flags=re.M).group(1)
        assert stated == {taken}, (stack, stated, taken)
