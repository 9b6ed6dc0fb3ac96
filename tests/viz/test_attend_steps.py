"""``graphformer attend`` on the universal models: one map per ACT step (the layers axis is the
steps axis), the steps each token pondered beside the map, its halted rows marked, the page's
axis labelled "step", and a step the model or the input does not have refused in one line."""

import numpy as np
import pytest
import torch
from helpers import saved_dense, small_copy_data, small_recall_data, train_tiny
from matplotlib.patches import Rectangle
from test_attend import page_maps, refused
from test_player import browser  # noqa: F401  (a fixture: the headless Chromium)

from graphformer.cli import main
from graphformer.decoding import translate_ids
from graphformer.graphs import make_batch
from graphformer.running.loaded import LoadedRun
from graphformer.training import checkpoint
from graphformer.training.run_dir import BEST
from graphformer.viz.attend_views import attend, draw_grid
from graphformer.viz.step_maps import step_maps
from graphformer.viz.step_views import HALTED_HATCH

MAX_DEPTH = 3


def train(data, run, *options):
    return train_tiny(data, run, "--max-depth", str(MAX_DEPTH), "--epochs", "1", *options, layers=False)


@pytest.fixture(scope="module")
def universal_run(tmp_path_factory):
    """A tiny encoder-decoder Universal Transformer trained 1 epoch on copy, and its data."""
    root = tmp_path_factory.mktemp("attend-universal")
    data = small_copy_data(root / "data", n_train=64)
    return train(data, root / "run", "--task", "parallel", "--model", "universal"), data


def halting(run, path, weight_std: float, bias: float, seed: int = 0):
    """A copy of the run's checkpoint at ``path`` whose halting units are redrawn: a large bias
    halts every token after one step; wide weights make tokens halt at different steps."""
    state = checkpoint.load(run / BEST)
    torch.manual_seed(seed)
    for side in ("encoder.halt", "decoder_halt"):
        weight = state["model"][f"{side}.proj.weight"]
        state["model"][f"{side}.proj.weight"] = torch.randn_like(weight) * weight_std
        state["model"][f"{side}.proj.bias"] = torch.full((1,), bias)
    checkpoint.save_atomic({k: v for k, v in state.items() if k != "format"}, path)
    return path


def line_of(data):
    return (data / "test.src").read_text().splitlines()[0]


def test_the_maps_written_are_the_step_maps_of_the_decoded_output(universal_run, tmp_path):
    run, data = universal_run
    line = line_of(data)
    saved, page = tmp_path / "maps.pt", tmp_path / "page.html"
    varied = halting(run, tmp_path / "varied.pt", weight_std=3.0, bias=0.0)
    argv = ["attend", str(run), "--input", line, "--beam", "1", "--checkpoint", str(varied)]
    assert main([*argv, "-o", str(page), "--save-maps", str(saved)]) == 0
    (attended,) = saved_dense(saved)
    loaded = LoadedRun(run, str(varied))
    ids = loaded.src_vocab.encode(line.split())
    (hyp,) = translate_ids(loaded.model, [ids], beam=1)
    batch = make_batch(loaded.model.make_pool(), [ids], [hyp.tokens])
    assert set(attended["maps"]) == {"enc", "dec", "cross"}
    shown, data_of_page = page_maps(page.read_text())
    assert data_of_page["unit"] == "step"
    for block in data_of_page["sublayers"]:
        sublayer = block["name"]
        expected = step_maps(loaded.model, batch, sublayer)
        maps = attended["maps"][sublayer]
        assert maps.shape[:2] == (expected.steps, 4) and expected.steps <= MAX_DEPTH
        torch.testing.assert_close(maps, expected.dense(), equal_nan=True, rtol=0, atol=1e-6)
        assert attended["ponder"][sublayer] == block["ponder"] == expected.ponder.tolist()
        assert block["layers"] == list(range(1, expected.steps + 1))
        np.testing.assert_array_equal(shown[sublayer], maps.numpy())  # the page holds the same float32 numbers
    assert len(set(attended["ponder"]["enc"])) > 1, "the redrawn halting units should stop tokens at different steps"


def test_the_picture_hatches_each_halted_row_and_labels_the_ponder_steps(universal_run, tmp_path):
    run, data = universal_run
    varied = halting(run, tmp_path / "varied.pt", weight_std=3.0, bias=0.0)
    (attended,) = attend(run, [line_of(data)], tmp_path / "x.png", sublayer="enc", beam=1, checkpoint=str(varied))
    assert (tmp_path / "x.png").read_bytes().startswith(b"\x89PNG")
    ponder, (queries, _) = attended.ponder["enc"], attended.tokens["enc"]
    figure = draw_grid(attended)
    panels = [ax for ax in figure.axes if ax.get_title().startswith("step ")]
    assert len(panels) == len(attended.maps["enc"]) * 4  # steps by heads
    for ax in panels:
        step = int(ax.get_title().split()[1].rstrip(","))
        hatched = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch() == HALTED_HATCH]
        assert len(hatched) == sum(steps < step for steps in ponder)
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [f"{token} ({steps})" for token, steps in zip(queries, ponder)]
    assert any(steps < len(attended.maps["enc"]) for steps in ponder), "some row should be hatched"


def test_a_step_beyond_max_depth_or_the_inputs_steps_is_refused(universal_run, tmp_path, capsys):
    run, data = universal_run
    line, out = line_of(data), tmp_path / "out.png"
    capsys.readouterr()
    refused(capsys, ["--input", line, "--layer", str(MAX_DEPTH)], run, out, f"--layer {MAX_DEPTH} is out of range")
    at_once = halting(run, tmp_path / "at-once.pt", weight_std=0.0, bias=20.0)  # every token halts after step 1
    argv = ["--input", line, "--checkpoint", str(at_once), "--sublayer", "enc", "--layer", "1"]
    refused(capsys, argv, run, out, "every enc query of input line 1 halted within 1 ACT step", "from 0 to 0")
    saved = tmp_path / "once.pt"
    assert main(["attend", str(run), *argv[:-1], "0", "--save-maps", str(saved)]) == 0
    (attended,) = saved_dense(saved)
    assert attended["maps"]["enc"].shape[0] == 1 and set(attended["ponder"]["enc"]) == {1}


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("attend-universal-encoder")
    data = small_recall_data(root / "data")
    return train(data, root / "run", "--task", "recall", "--model", "universal-encoder", "--pooling", "cls"), data


def test_a_universal_classifier_has_enc_steps_and_its_label(classifier_run, tmp_path):
    run, data = classifier_run
    saved = tmp_path / "maps.pt"
    assert main(["attend", str(run), "--input", line_of(data), "--save-maps", str(saved)]) == 0
    (attended,) = saved_dense(saved)
    assert set(attended["maps"]) == set(attended["ponder"]) == {"enc"} and attended["probability"] is not None
    enc = attended["maps"]["enc"]
    assert enc.shape[0] == max(attended["ponder"]["enc"]) <= MAX_DEPTH
    halted = torch.arange(enc.shape[0])[:, None] >= torch.tensor(attended["ponder"]["enc"])[None, :]
    assert torch.equal(enc[:, 0].isnan().all(-1), halted)  # a row is blank exactly after its query halted


def test_the_page_says_step_and_greys_a_halted_row(universal_run, tmp_path, browser):  # noqa: F811
    run, data = universal_run
    page = tmp_path / "page.html"
    varied = halting(run, tmp_path / "varied.pt", weight_std=3.0, bias=0.0)
    argv = ["attend", str(run), "--input", line_of(data), "--beam", "1", "--sublayer", "enc"]
    assert main([*argv, "--checkpoint", str(varied), "-o", str(page)]) == 0
    maps, data_of_page = page_maps(page.read_text())
    ponder, steps = data_of_page["sublayers"][0]["ponder"], maps["enc"].shape[0]
    browser.get(page.as_uri())
    rows = browser.execute_script(
        "return [...document.querySelectorAll('.overview tr td:first-child')].map(c => c.textContent)"
    )
    assert rows[1:] == [f"step {s}" for s in range(1, steps + 1)]  # the first row names the heads
    query = next(q for q, p in enumerate(ponder) if p < steps)  # halted before the last step
    pixel = browser.execute_script(
        "const c = [...document.querySelectorAll('canvas.thumb')].find(t => t.dataset.at === arguments[0]);"
        "return [...c.getContext('2d').getImageData(0, arguments[1], 1, 1).data];",
        f"0,{steps - 1},0",
        query,
    )
    assert pixel == [200, 200, 200, 255]  # grey: this query had halted
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
