"""``--viz-every`` on the universal models: each recorded epoch holds the step maps of the first
validation sample (padded to max_depth), the steps each query pondered; ``animate`` and
``heatmap`` draw every step as a panel, a frame per epoch."""

import pytest
import torch
from helpers import recorded_dense, small_copy_data, small_recall_data, snapshot, train_tiny
from PIL import Image

from graphformer.cli import main
from graphformer.graphs import make_batch
from graphformer.running.loaded import LoadedRun
from graphformer.viz.recording import load_records, picture
from graphformer.viz.step_maps import step_maps

MAX_DEPTH = 3


def train(data, run, *options):
    return train_tiny(data, run, "--max-depth", str(MAX_DEPTH), "--viz-every", "1", *options, layers=False)


@pytest.fixture(scope="module")
def recorded_universal(tmp_path_factory):
    """A tiny Universal Transformer trained 2 epochs on copy with --viz-every 1, and its data."""
    root = tmp_path_factory.mktemp("viz-universal")
    data = small_copy_data(root / "data", n_train=48)
    return train(data, root / "run", "--task", "parallel", "--model", "universal", "--epochs", "2"), data


def test_each_epoch_records_the_step_maps_of_the_first_validation_sample(recorded_universal):
    run, data = recorded_universal
    records = load_records(run)
    assert [r["epoch"] for r in records] == [0, 1, 2]
    loaded = LoadedRun(run, "last")  # the weights of the last recorded epoch
    src = loaded.src_vocab.encode((data / "valid.src").read_text().splitlines()[0].split())
    tgt = loaded.tgt_vocab.encode((data / "valid.tgt").read_text().splitlines()[0].split())
    batch = make_batch(loaded.model.make_pool(), [src], [tgt])
    for sublayer in ("enc", "dec", "cross"):
        expected = step_maps(loaded.model, batch, sublayer)
        recorded, ponder = recorded_dense(records[-1])[sublayer], records[-1]["ponder"][sublayer]
        assert recorded.shape[:2] == (MAX_DEPTH, 4) and ponder == expected.ponder.tolist()
        torch.testing.assert_close(recorded[: expected.steps], expected.dense(), equal_nan=True, rtol=0, atol=1e-6)
        assert recorded[expected.steps :].isnan().all()  # the steps no query reached: blank
        for record in records:
            maps, steps = recorded_dense(record)[sublayer], torch.tensor(record["ponder"][sublayer])
            halted = torch.arange(MAX_DEPTH)[:, None] >= steps[None, :]  # (steps, queries)
            assert torch.equal(maps[:, 0].isnan().all(-1), halted)  # a row is blank exactly once halted


def test_animate_and_heatmap_draw_every_step_as_a_panel(recorded_universal, tmp_path, capsys):
    run, _ = recorded_universal
    records = load_records(run)
    drawn = picture(records[-1], "enc", head=1)
    assert drawn.panel_titles == [f"step {s}" for s in range(1, MAX_DEPTH + 1)]
    tokens, ponder = records[-1]["enc_labels"], records[-1]["ponder"]["enc"]
    assert drawn.queries == [f"{t} ({p})" for t, p in zip(tokens, ponder)] and "per ACT step" in drawn.title
    every = picture(records[0], "cross", head="all")
    assert len(every.maps) == MAX_DEPTH * 4 and every.panel_titles[5] == "step 2, head 1"
    gif, png = tmp_path / "steps.gif", tmp_path / "steps.png"
    assert main(["animate", str(run), "--relation", "dec", "--head", "0", "-o", str(gif)]) == 0
    assert Image.open(gif).n_frames == len(records)
    assert main(["heatmap", str(run), "--relation", "enc", "--head", "all", "-o", str(png)]) == 0
    assert Image.open(png).format == "PNG"
    capsys.readouterr()
    before = snapshot(run)
    try:
        status = main(["heatmap", str(run), "--layer", "0", "-o", str(tmp_path / "one.png")])
    except SystemExit as parse_error:
        status = parse_error.code
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "every ACT step as a panel; leave it out" in err, err
    assert not (tmp_path / "one.png").exists() and snapshot(run) == before


def test_a_universal_classifier_records_its_enc_steps(tmp_path):
    data = small_recall_data(tmp_path / "data")
    options = ["--task", "recall", "--model", "universal-encoder", "--pooling", "cls", "--epochs", "1"]
    run = train(data, tmp_path / "run", *options)
    (untrained, trained) = load_records(run)
    assert set(recorded_dense(trained)) == set(trained["ponder"]) == {"enc"} and "label" in trained
    assert recorded_dense(trained)["enc"].shape[0] == MAX_DEPTH
    assert len(trained["ponder"]["enc"]) == len(trained["enc_labels"])
