"""``train --init-from``: a new run that starts from another run's weights and vocabulary (a
curriculum: short samples first, then longer ones, or another attention pattern)."""

import json

import pytest
from helpers import TINY_MODEL, read_jsonl, small_recall_data

from graphformer.cli import build_parser, main, train_configs
from graphformer.data import recall
from graphformer.data.corpus import build_vocabs, read_split
from graphformer.training import checkpoint
from graphformer.training.run_dir import BEST, LAST
from graphformer.training.trainer import Trainer

ENCODER = ["--task", "recall", "--model", "encoder", "--batch-size", "16"]


def longer_recall_data(path, num_values=4):
    """Recall on the keys and values of `small_recall_data`, with longer samples and another seed."""
    return recall.write_recall(
        path,
        seed=7,
        sizes={"train": 160, "valid": 30, "test": 30},
        min_length=12,
        max_length=12,
        num_keys=6,
        num_values=num_values,
    )


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("short")
    data = small_recall_data(tmp / "data")
    assert (
        main(
            [
                "train",
                *ENCODER,
                "--data-dir",
                str(data),
                "--enc-attention",
                "window:2",
                "--epochs",
                "1",
                "--out",
                str(tmp / "run"),
                *TINY_MODEL,
            ]
        )
        == 0
    )
    return tmp / "run"


def start(argv):
    """A Trainer set up as ``graphformer train ARGV`` would set it up, before any step."""
    args = build_parser().parse_args(["train", *argv, "--quiet"])
    model_cfg, train_cfg = train_configs(args)
    return Trainer(args.out, model_cfg, train_cfg, show_progress=False)


def test_a_run_starts_from_the_weights_vocabulary_and_model_options_of_another(short_run, tmp_path):
    longer = longer_recall_data(tmp_path / "longer")
    own_vocab, _ = build_vocabs(read_split(longer, "train"))
    saved = checkpoint.load(short_run / BEST)
    assert own_vocab.itos != saved["vocab"]["src"]  # the new data alone would give other token ids

    trainer = start(
        [
            *ENCODER,
            "--data-dir",
            str(longer),
            "--init-from",
            str(short_run),
            "--enc-attention",
            "full",
            "--dropout",
            "0.2",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    try:
        assert trainer.src_vocab.itos == saved["vocab"]["src"] and trainer.tgt_vocab.itos == saved["vocab"]["tgt"]
        weights = trainer.model.state_dict()
        assert weights.keys() == saved["model"].keys()
        assert all(weights[name].equal(saved["model"][name]) for name in weights)
        cfg = trainer.model.cfg
        assert (cfg.layers, cfg.d_model, cfg.heads, cfg.d_ff) == (1, 32, 4, 64)  # taken from the checkpoint
        assert (cfg.enc_attention, cfg.dropout) == ("full", 0.2)  # given here
        assert trainer.progress.step == 0 and trainer.schedule.last_epoch == 0  # a fresh optimizer
    finally:
        trainer.close()


def test_a_curriculum_run_trains_and_records_where_it_started(short_run, tmp_path):
    longer = longer_recall_data(tmp_path / "longer")
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                *ENCODER,
                "--data-dir",
                str(longer),
                "--init-from",
                str(short_run / LAST),
                "--max-steps",
                "3",
                "--out",
                str(run),
                "--quiet",
            ]
        )
        == 0
    )
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["init_from"] == str(short_run / LAST)
    assert config["model"]["enc_attention"] == "window:2" and config["model"]["d_model"] == 32
    assert [r["step"] for r in read_jsonl(run / "steps.jsonl")] == [1, 2, 3]
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "5", "--quiet"]) == 0  # resumes its own
    assert read_jsonl(run / "steps.jsonl")[-1]["step"] == 5


@pytest.mark.parametrize(
    "change, num_values, message",
    [
        (["--init-from", "{tmp}/nowhere"], 4, "no checkpoint at {tmp}/nowhere"),
        (
            ["--init-from", "{run}", "--d-model", "64"],
            4,
            "--init-from {run}/checkpoint_best.pt: its weights do not fit this model; give the options it was "
            "trained with: d_model (32 there, 64 here)",
        ),
        (["--init-from", "{run}"], 5, "training label 'v4' is not among its labels"),
        (
            ["--init-from", "{run}", "--model", "universal-encoder"],
            4,
            "it was trained with --model encoder, this run has --model universal-encoder",
        ),
    ],
)
def test_a_checkpoint_that_cannot_start_the_run_is_a_one_line_error(
    short_run, tmp_path, capsys, change, num_values, message
):
    longer = longer_recall_data(tmp_path / "longer", num_values=num_values)
    change = [c.format(tmp=tmp_path, run=short_run) for c in change]
    assert main(["train", *ENCODER, "--data-dir", str(longer), *change, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphformer: error: ") and message.format(tmp=tmp_path, run=short_run) in err
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()  # nothing half-made left behind


def test_tokens_the_checkpoint_never_saw_are_a_warning(short_run, tmp_path, capsys):
    other = recall.write_recall(
        tmp_path / "other",
        seed=3,
        sizes={"train": 40, "valid": 10, "test": 10},
        min_length=8,
        max_length=8,
        num_keys=9,
        num_values=4,
    )
    assert (
        main(
            [
                "train",
                *ENCODER,
                "--data-dir",
                str(other),
                "--init-from",
                str(short_run),
                "--max-steps",
                "1",
                "--out",
                str(tmp_path / "run"),
                "--quiet",
            ]
        )
        == 0
    )
    unknown = sum(
        tok in ("k6", "k7", "k8") for line in (other / "train.src").read_text().splitlines() for tok in line.split()
    )
    assert unknown > 0
    assert f"warning: {unknown} of " in capsys.readouterr().err


def test_weights_held_apart_do_not_start_a_run_that_ties_them(tmp_path, capsys):
    """With --tie, one matrix serves the embeddings and the generator: loading three trained
    matrices into it would keep one and silently drop the others."""
    from helpers import small_copy_data

    data = small_copy_data(tmp_path / "data")
    copy = ["--task", "parallel", "--data-dir", str(data), "--batch-size", "16", "--quiet", *TINY_MODEL]
    assert main(["train", *copy, "--epochs", "1", "--tie", "none", "--out", str(tmp_path / "untied")]) == 0
    assert (
        main(["train", *copy, "--init-from", str(tmp_path / "untied"), "--tie", "all", "--out", str(tmp_path / "tied")])
        == 2
    )
    err = capsys.readouterr().err
    assert "it was trained with --tie none, this run has --tie all" in err and err.count("\n") == 1
    assert not (tmp_path / "tied").exists()
