"""Loss, schedule, checkpoints and exact resume."""

import math
import pickle

import pytest
import torch
from helpers import (
    TINY_MODEL,
    assert_same_last_weights,
    read_jsonl,
    small_copy_data,
    small_recall_data,
    train_straight_and_interrupted,
)

from graphformer.cli import main
from graphformer.evaluation.loss import label_smoothed_nll, token_accuracy_counts
from graphformer.graphs import make_batch
from graphformer.training import checkpoint
from graphformer.training.run_dir import BEST, LAST
from graphformer.training.schedule import make_optimizer, noam_rate
from graphformer.vocab import NEVER_EMITTED, PAD, SOS


def test_label_smoothing_matches_its_definition():
    logp = torch.log_softmax(torch.randn(5, 9, dtype=torch.float64), 1)
    gold = torch.tensor([4, 5, 2, 8, 3])
    eps = 0.2
    q = torch.full((5, 9), eps / 7, dtype=torch.float64)
    q[:, PAD] = 0
    q[torch.arange(5), gold] = 1 - eps
    expected = -(q * logp).sum()
    assert float(label_smoothed_nll(logp, gold, eps)) == pytest.approx(float(expected), rel=1e-12)
    assert float(label_smoothed_nll(logp, gold, 0.0)) == pytest.approx(float(-logp[torch.arange(5), gold].sum()))


def test_padding_gold_is_ignored():
    logp = torch.log_softmax(torch.randn(3, 6), 1)
    with_pad = label_smoothed_nll(logp, torch.tensor([4, PAD, 5]), 0.1)
    without = label_smoothed_nll(logp[[0, 2]], torch.tensor([4, 5]), 0.1)
    assert float(with_pad) == pytest.approx(float(without))


def test_token_accuracy_skips_what_decoding_never_outputs():
    # Node 0 puts most mass on <s> (search never emits it): its prediction is the best other token.
    logp = torch.log_softmax(
        torch.tensor([[0.0, 5.0, 0.0, 0.0, 3.0, 1.0], [0.0, 0.0, 0.0, 0.0, 1.0, 4.0], [9.0, 0.0, 0.0, 0.0, 1.0, 0.0]]),
        dim=1,
    )
    gold = torch.tensor([4, 5, PAD])
    assert token_accuracy_counts(logp, gold) == (1, 2)  # the raw argmax of node 0 is <s>
    assert token_accuracy_counts(logp, gold, NEVER_EMITTED) == (2, 2)
    assert SOS in NEVER_EMITTED


def test_the_console_line_rounds_every_number_lists_included():
    from graphformer.training.report import format_metrics

    line = format_metrics(
        {
            "epoch": 3,
            "step": 60,
            "valid_loss": 0.123456789,
            "valid_src_step_fraction": [1.0, 0.6666666666666666, 0.1234567],
        }
    )
    assert line == "epoch 3 (step 60): valid loss 0.1235, src step fraction [1, 0.6667, 0.1235]"


def test_the_console_line_names_a_classifiers_accuracy_once_and_a_translators_scores_each():
    from graphformer.training.report import format_metrics

    same = 0.355  # a classifier's four names of one number (evaluate sets "accuracy" for it alone)
    names = ("token_accuracy", "exact_match", "char_accuracy", "accuracy")
    classifier = {"epoch": 1, "step": 9, "valid_loss": 1.5, **{f"valid_{n}": same for n in names}, "lr": 0.001}
    assert format_metrics(classifier) == "epoch 1 (step 9): valid loss 1.5, accuracy 0.355, lr 0.001"
    translator = {"epoch": 1, "step": 9, "valid_loss": 1.5, "valid_token_accuracy": 0.9, "valid_exact_match": 0.5}
    assert format_metrics(translator) == "epoch 1 (step 9): valid loss 1.5, token accuracy 0.9, exact match 0.5"


def test_the_headline_names_scores_as_evaluate_json_does_or_in_words():
    """evaluate's line (``sep="="``) and train's last line (``sep=" "``) show the same scores:
    loss and accuracies in `HEADLINE` order, nothing else, a classifier's accuracy once."""
    from graphformer.evaluation.scores import headline

    translator = {"n": 30, "bleu": 12.5, "exact_match": 0.997, "loss": 0.085, "token_accuracy": 0.99981}
    assert headline(translator) == "loss=0.0850 token_accuracy=0.9998 exact_match=0.9970"
    assert headline(translator, " ") == "loss 0.0850, token accuracy 0.9998, exact match 0.9970"
    classifier = {"loss": 1.2, **{n: 0.355 for n in ("token_accuracy", "exact_match", "char_accuracy", "accuracy")}}
    assert headline(classifier) == "loss=1.2000 accuracy=0.3550"


def test_noam_schedule():
    d, warm = 512, 4000
    assert noam_rate(warm, d, warm, 1.0) == pytest.approx(d**-0.5 * warm**-0.5)
    assert noam_rate(100, d, warm, 2.0) == pytest.approx(2 * d**-0.5 * 100 * warm**-1.5)
    assert noam_rate(16000, d, warm, 1.0) == pytest.approx(d**-0.5 / math.sqrt(16000))
    opt, sched = make_optimizer([torch.nn.Parameter(torch.zeros(1))], d, warm, 1.0)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    for _ in range(9):
        opt.step()
        sched.step()
    assert sched.get_last_lr()[0] == pytest.approx(noam_rate(10, d, warm, 1.0))


def test_atomic_save_leaves_no_temporary_file(tmp_path):
    checkpoint.save_atomic({"x": torch.ones(2)}, tmp_path / "c.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]
    assert torch.equal(checkpoint.load(tmp_path / "c.pt")["x"], torch.ones(2))


def test_failed_save_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint.save_atomic({"x": torch.ones(2)}, path)
    with pytest.raises((pickle.PicklingError, AttributeError)):  # which one: the Python version's choice
        checkpoint.save_atomic({"x": lambda: None}, path)  # not picklable: fails mid-write
    assert torch.equal(checkpoint.load(path)["x"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def train(args):
    assert main(["train", *args]) == 0


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_resume_continues_exactly(tmp_path, precision):
    data = small_copy_data(tmp_path / "data")
    common = [
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--dropout",
        "0.1",
        "--precision",
        precision,
        *TINY_MODEL,
    ]
    straight_run, stopped_run = train_straight_and_interrupted(tmp_path, common)

    straight = read_jsonl(straight_run / "steps.jsonl")
    resumed = read_jsonl(stopped_run / "steps.jsonl")
    assert len(straight) == len(resumed) == 30
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]
    assert read_jsonl(stopped_run / "metrics.jsonl") == read_jsonl(straight_run / "metrics.jsonl")
    assert_same_last_weights(straight_run, stopped_run)


def test_training_in_bfloat16_autocasts_its_steps_and_validates_in_float32(tmp_path, capsys, monkeypatch):
    import graphformer.precision
    from graphformer.model.layers import Generator

    seen, forward = [], Generator.forward

    def spy(self, h):  # (a training step?, under autocast?)
        seen.append((torch.is_grad_enabled(), torch.is_autocast_cpu_enabled()))
        return forward(self, h)

    monkeypatch.setattr(Generator, "forward", spy)
    monkeypatch.setattr(graphformer.precision, "cpu_bfloat16_instructions", lambda: [])  # a CPU that emulates them
    data, run = small_copy_data(tmp_path / "data", n_train=400), tmp_path / "run"
    train(
        [
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--epochs",
            "3",
            "--batch-size",
            "16",
            "--out",
            str(run),
            "--precision",
            "bfloat16",
            *TINY_MODEL,
        ]
    )
    assert "no bfloat16 instructions" in capsys.readouterr().err  # said, and the run goes on
    assert {autocast for step, autocast in seen if step} == {True}
    assert {autocast for step, autocast in seen if not step} == {False}
    metrics = read_jsonl(run / "metrics.jsonl")
    assert metrics[-1]["valid_loss"] < metrics[0]["valid_loss"]
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--epochs", "4", "--precision", "float32"]) == 2
    assert "--precision is 'bfloat16' in this run" in capsys.readouterr().err


def test_training_lowers_the_validation_loss_and_keeps_best(tmp_path):
    data = small_copy_data(tmp_path / "data", n_train=400)
    train(
        [
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--epochs",
            "3",
            "--batch-size",
            "16",
            "--out",
            str(tmp_path / "run"),
            *TINY_MODEL,
        ]
    )
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    assert metrics[-1]["valid_loss"] < metrics[0]["valid_loss"]
    assert {"valid_token_accuracy", "valid_exact_match", "lr"} <= set(metrics[0])
    best = checkpoint.load(tmp_path / "run" / BEST)
    assert best["progress"]["best"] == min(m["valid_loss"] for m in metrics)  # parallel data: selected by loss
    for key in ("model", "optimizer", "schedule", "rng", "vocab", "model_config", "train_config"):
        assert key in best


@pytest.mark.parametrize("model", ["transformer", "universal", "universal-encoder"])
def test_gradient_accumulation_equals_one_big_batch(tmp_path, model):
    """Two batches of 8 accumulated give the update of their union as one batch, the Universal
    Transformer's ponder cost included (on data whose sources and targets differ in length, so
    that each side's cost must be averaged over its own nodes)."""
    from graphformer.model import ModelConfig
    from graphformer.training.config import TrainConfig
    from graphformer.training.trainer import Trainer

    if model == "universal-encoder":
        data, task = small_recall_data(tmp_path / "data"), "recall"
        depth = dict(model=model, max_depth=3, ponder_weight=0.05, pooling="mean")
    else:
        data, task = small_copy_data(tmp_path / "data"), "parallel"
        src = (data / "train.src").read_text().splitlines()
        (data / "train.tgt").write_text(
            "".join(" ".join(line.split()[: 1 + len(line.split()) // 3]) + "\n" for line in src)
        )  # a third of each source: other lengths
        depth = dict(layers=1) if model == "transformer" else dict(model=model, max_depth=3, ponder_weight=0.05)
    model_cfg = dict(src_vocab=1, tgt_vocab=1, d_model=32, heads=4, d_ff=64, dropout=0.0, **depth)
    cfg = dict(task=task, data_dir=str(data), batch_size=8, warmup=10)
    acc = Trainer(tmp_path / "acc", ModelConfig(**model_cfg), TrainConfig(**cfg, accumulate=2), show_progress=False)
    one = Trainer(tmp_path / "one", ModelConfig(**model_cfg), TrainConfig(**cfg), show_progress=False)
    acc.model.double()
    one.model.double()
    one.model.load_state_dict(acc.model.state_dict())
    steps, global_steps = acc.epoch_plan(0)
    train = acc.splits["train"]
    for s in range(3):
        counts = acc.step_counts(global_steps[s])
        union = make_batch(
            acc.pool, [train.src[j] for j in sum(steps[s], [])], [train.tgt[j] for j in sum(steps[s], [])]
        )
        assert counts["gold"] == len(union.gold) and counts["src"] == int(union.src_nodes.sum())
        assert counts["tgt"] == (len(union.tgt_tokens) if model != "universal-encoder" else 0)
        acc.train_step(steps[s], counts)
        one.train_step([sum(steps[s], [])], counts)
    for (name, p), q in zip(acc.model.named_parameters(), one.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-10, rtol=0, msg=name)


def test_tensorboard_logs_steps_metrics_and_attention_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    data = small_copy_data(tmp_path / "data", n_train=64)
    run = tmp_path / "run"
    run.mkdir()  # where a run was killed before its first checkpoint: its records go, the new log stays
    (run / "config.json").write_text("{}")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.old").write_bytes(b"")
    train(
        [
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--epochs",
            "2",
            "--batch-size",
            "16",
            "--viz-every",
            "1",
            "--tensorboard",
            "--out",
            str(run),
            *TINY_MODEL,
        ]
    )
    assert not (run / "tensorboard" / "events.out.tfevents.old").exists()
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    steps = read_jsonl(run / "steps.jsonl")
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [s["step"] for s in steps]
    assert [e.value for e in loss] == pytest.approx([s["loss"] for s in steps], rel=1e-6)
    assert {"train/lr", "train/tokens_per_s", "valid/loss", "valid/exact_match"} <= set(events.Tags()["scalars"])
    assert len(events.Scalars("valid/loss")) == 2
    images = events.Images("attention/cross")
    assert len(images) == 3 and images[0].width > 100  # epoch 0 (untrained), 1 and 2


def test_default_threads_share_the_physical_cores_among_processes(monkeypatch):
    import os

    from graphformer.training import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(threads, "_physical_cores", lambda: 4)  # 2 hyper-threads per core
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert threads.default_threads() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun --nproc_per_node=2
    assert threads.default_threads() == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what torchrun sets for several processes: not a choice
    assert threads.default_threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # one process: the user's own choice wins
    assert threads.default_threads() == 3


def test_config_json_records_threads_and_backend(tmp_path):
    import json

    data = small_copy_data(tmp_path / "data", n_train=32)
    train(
        [
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--threads",
            "1",
            "--attention-backend",
            "torch",
            "--out",
            str(tmp_path / "run"),
            *TINY_MODEL,
        ]
    )
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    assert (saved["threads"], saved["attention_backend"]) == (1, "torch")
    assert checkpoint.load(tmp_path / "run" / LAST)["train_config"]["attention_backend"] == "torch"


def test_plain_progress_shows_the_last_step_of_a_run_stopped_mid_epoch(capsys):
    """Without a terminal a line is printed every 30 s and at the epoch's last step; a run stopped
    before both (--max-steps, --max-minutes, Ctrl-C) shows its last step when the bar closes, once;
    an error that ends the run stays the only line."""
    import re

    from graphformer.training.report import ConsoleReport

    report = ConsoleReport(total=10, done=0, desc="epoch 1/1", enabled=True)
    for _ in range(3):
        report.step(100, loss=1.5, lr=1e-3)
    assert capsys.readouterr().err == ""  # not 30 s yet, not the last step
    report.close()
    report.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"epoch 1/1 step 3/10: loss 1\.500, \d+ tokens/s, lr 1\.00e-03", lines[0])
    failing = ConsoleReport(total=10, done=0, desc="epoch 1/1", enabled=True)
    failing.step(100, loss=1.5, lr=1e-3)
    failing.close(show_last=False)
    assert capsys.readouterr().err == ""


def test_progress_rate_is_the_last_intervals_not_the_epochs():
    """tokens/s counts the tokens since the last line over the time since it: a slow first interval
    does not drag down the rate shown for a fast second one."""
    from graphformer.training.report import ConsoleReport

    now = [0.0]
    report = ConsoleReport(total=10, done=0, desc="epoch 1/1", enabled=False, every_s=30.0, clock=lambda: now[0])
    now[0] = 40.0  # a slow interval: 100 tokens in 40 s, and a line is due
    assert report.step(100, loss=1.0, lr=1e-3) == 100 / 40
    now[0] = 41.0  # a fast one: 1000 tokens in the 1 s since that line
    assert report.step(1000, loss=1.0, lr=1e-3) == 1000 / 1
    now[0] = 43.0  # the interval goes on: both steps since the line, over 3 s
    assert report.step(500, loss=1.0, lr=1e-3) == 1500 / 3
    report.close()
