"""No way to lose a run: resume continues the configured run, crashes at any point leave a
consistent run directory, and bad input is one line on stderr with exit status 2 and nothing
changed."""

import json
import shutil

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data, snapshot

from graphformer.cli import main
from graphformer.errors import UserError
from graphformer.training import checkpoint
from graphformer.training.run_dir import BEST, LAST, RunDir


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_copy_data(tmp_path_factory.mktemp("robust") / "data", n_train=96)


def train(*argv) -> int:
    return main(["train", *argv])


def fresh(data, run, *extra):
    return train(
        "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--batch-size", "16", *TINY_MODEL, *extra
    )


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("robust") / "run"
    assert fresh(data, run, "--epochs", "1") == 0
    return run


def one_line_error(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("graphformer: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


# ---- resume continues the run that was started ---------------------------------------------
def test_plain_resume_keeps_epochs_and_max_steps(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "2", "--max-steps", "3") == 0
    assert train("--out", str(run), "--resume") == 0  # the run is done as configured: no more steps
    assert [r["step"] for r in read_jsonl(run / "steps.jsonl")] == [1, 2, 3]
    config = json.loads((run / "config.json").read_text())["train"]
    assert (config["epochs"], config["max_steps"]) == (2, 3)
    out = capsys.readouterr().out
    assert out.count("it has taken its --max-steps 3; to go on: graphformer train --out") == 2
    assert "--resume --max-steps 6" in out

    assert train("--out", str(run), "--resume", "--max-steps", "1000") == 0  # lift the step limit only
    assert [m["epoch"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]  # its 2 epochs, not the default
    assert json.loads((run / "config.json").read_text())["train"]["max_steps"] == 1000

    assert train("--out", str(run), "--resume", "--epochs", "3") == 0  # train longer
    assert [m["epoch"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((run / "config.json").read_text())["train"]["epochs"] == 3


def test_resuming_a_finished_run_says_how_to_train_longer(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = snapshot(run)
    assert train("--out", str(run), "--resume", "--epochs", "1") == 0
    out = capsys.readouterr().out
    assert "it has finished its --epochs 1; to train longer:" in out and "--resume --epochs 2" in out
    assert snapshot(run).keys() == before.keys() and len(read_jsonl(run / "metrics.jsonl")) == 1


def test_a_time_budget_stops_after_the_step_that_exhausts_it_and_resume_gives_a_new_one(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "2", "--max-minutes", "1e-6") == 0  # spent before the first step ends
    assert [r["step"] for r in read_jsonl(run / "steps.jsonl")] == [1]
    assert checkpoint.load(run / LAST)["progress"]["step"] == 1
    assert "--resume" in capsys.readouterr().out
    assert train("--out", str(run), "--resume", "--max-minutes", "60") == 0  # a new budget: the run finishes
    assert [m["epoch"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]
    assert len(read_jsonl(run / "steps.jsonl")) == 2 * 96 // 16


@pytest.mark.parametrize(
    "flag,value,name",
    [
        ("--lr-factor", "0.3", "--lr-factor"),
        ("--d-model", "64", "--d-model"),
        ("--enc-attention", "window:1", "--enc-attention"),
    ],
)
def test_resume_refuses_options_that_would_make_another_run(trained, tmp_path, capsys, flag, value, name):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = snapshot(run)
    one_line_error(
        capsys, ["train", "--out", str(run), "--resume", flag, value], name, "start a new run", "in this run; you gave"
    )
    assert snapshot(run) == before
    one_line_error(
        capsys,
        ["train", "--out", str(run), "--resume", "--init-from", str(trained)],
        "--init-from is not set in this run; you gave",
    )


def test_a_run_resumes_only_with_its_batches_per_step(trained, tmp_path, capsys):
    """Step s of an epoch takes accumulate x processes batches: another product would train some
    batches twice and skip others. Another process count is taken with the --accumulate that keeps
    the product. (The checkpoint says 2 processes here, as a torchrun run's would.)"""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    state = checkpoint.load(run / LAST)
    assert state["processes"] == 1 and state["train_config"]["accumulate"] == 1
    checkpoint.save_atomic({k: v for k, v in state.items() if k != "format"} | {"processes": 2}, run / LAST)
    before = snapshot(run)
    one_line_error(
        capsys,
        ["train", "--out", str(run), "--resume", "--epochs", "2"],
        "takes 2 batches per optimizer step (--accumulate 1 x 2 process(es)), this would take 1 (1 x 1)",
        "--resume --accumulate 2",
    )
    assert snapshot(run) == before
    one_line_error(
        capsys,
        ["train", "--out", str(run), "--resume", "--epochs", "2", "--accumulate", "3"],
        "this would take 3 (3 x 1)",
        "--resume --accumulate 2",
    )
    assert snapshot(run) == before
    checkpoint.save_atomic({k: v for k, v in state.items() if k != "format"} | {"processes": 3}, run / LAST)
    one_line_error(
        capsys,
        ["train", "--out", str(run), "--resume", "--epochs", "2", "--accumulate", "2"],
        "takes 3 batches per optimizer step (--accumulate 1 x 3 process(es)), this would take 2 (2 x 1)",
        "--resume --accumulate 3",
    )
    # A checkpoint written before the count was recorded: taken as this count.
    checkpoint.save_atomic({k: v for k, v in state.items() if k not in ("format", "processes")}, run / LAST)
    one_line_error(
        capsys,
        ["train", "--out", str(run), "--resume", "--epochs", "2", "--accumulate", "2"],
        "this would take 2 (2 x 1)",
        "--resume --accumulate 1",
    )
    assert main(["train", "--out", str(run), "--resume", "--epochs", "2"]) == 0


def test_a_resume_refused_after_it_locked_the_run_leaves_the_run_as_it_was(trained, tmp_path, capsys):
    """The data is read once the run is locked, which writes .lock: a refusal then takes back the
    lock file it made (a run copied without one keeps none), as a refused start does."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / ".lock").unlink()
    config = json.loads((run / "config.json").read_text())
    config["train"]["data_dir"] = str(tmp_path / "gone")  # the run's data moved away
    (run / "config.json").write_text(json.dumps(config))
    before = snapshot(run)
    one_line_error(
        capsys, ["train", "--out", str(run), "--resume", "--epochs", "2"], f"{tmp_path / 'gone'} does not exist"
    )
    assert snapshot(run) == before


def test_under_torchrun_a_process_past_the_first_says_its_rank_in_its_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert main(["train", "--out", str(tmp_path / "run"), "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphformer (rank 1): error: --resume: no run to continue") and err.count("\n") == 1, err


def test_batches_per_step_that_processes_cannot_share_evenly_name_the_original_count(tmp_path):
    from graphformer.errors import UserError
    from graphformer.training.steps import check_batches_per_step

    with pytest.raises(
        UserError,
        match=r"takes 3 batches per optimizer step \(--accumulate 3 x 1 process\(es\)\), "
        r"this would take 2 \(1 x 2\); 2 process\(es\) cannot share 3 batches evenly: "
        r"resume it on 1 process\(es\) \(graphformer train --out",
    ):
        check_batches_per_step({"train_config": {"accumulate": 3}, "processes": 1}, 1, 2, tmp_path)
    with pytest.raises(
        UserError,
        match=r"resume it with graphformer train --processes 2 --out .* --resume "
        r"--accumulate 1",
    ):  # 3 x 2 = 6 batches
        check_batches_per_step({"train_config": {"accumulate": 1}, "processes": 2}, 3, 2, tmp_path)
    check_batches_per_step({"train_config": {"accumulate": 6}, "processes": 1}, 3, 2, tmp_path)  # 3 x 2: accepted


def test_processes_under_torchrun_of_another_count_is_one_line_and_starts_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")  # this process is one of torchrun's 3
    one_line_error(
        capsys,
        ["train", "--task", "copy", "--out", str(tmp_path / "run"), "--processes", "2"],
        "--processes 2 starts its own processes, but this one is already one of 3 (torchrun)",
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "device,gpus,needles",
    [
        ("cuda:0", 2, ["--device cuda:0 names one GPU, and each of the 2 processes takes its own: use --device cuda"]),
        ("cuda", 1, ["--device cuda: 2 processes take one GPU each, and 1 is visible"]),
        ("auto", 1, ["--device auto: 2 processes take one GPU each, and 1 is visible", "or use --device cpu"]),
        ("cuda", 0, ["--device cuda: no CUDA device is visible here; use cpu"]),
    ],
)
def test_processes_that_the_gpus_cannot_serve_one_each_are_refused_before_any_starts(
    tmp_path, capsys, monkeypatch, device, gpus, needles
):
    from graphformer.training import launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(launch, "run_processes", lambda *args: pytest.fail("processes were started"))
    one_line_error(
        capsys,
        ["train", "--task", "copy", "--out", str(tmp_path / "run"), "--processes", "2", "--device", device],
        *needles,
    )
    assert not (tmp_path / "run").exists()


def test_processes_on_the_cpu_or_on_enough_gpus_start(tmp_path, monkeypatch):
    from graphformer.training import launch

    started = []
    monkeypatch.setattr(launch, "run_processes", lambda argv, processes, resume: started.append(processes) or 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for device in ("cpu", "auto", "cuda"):
        assert (
            main(["train", "--task", "copy", "--out", str(tmp_path / "run"), "--processes", "2", "--device", device])
            == 0
        )
    assert started == [2, 2, 2]


def test_only_a_second_ctrl_c_aborts_a_stopping_run_a_repeated_sigterm_asks_again(capsys):
    """A job scheduler may send SIGTERM to every process and the launcher passes its own copy on:
    a second SIGTERM must not throw away the checkpoint the first one asked for."""
    import signal

    from graphformer.training.interrupts import StopRequest

    stop = StopRequest()
    stop(signal.SIGTERM, None)
    stop(signal.SIGTERM, None)
    assert stop.requested
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGINT, None)


def test_a_start_refused_by_the_lock_removes_nothing(data, tmp_path, capsys, monkeypatch):
    """Two trainings started on one new --out: the one refused must not remove what the other made."""

    def held(self):  # the other trainer made the folder a moment ago, holds it, and writes into it
        (self.path / "the other trainer's file").write_text("mine\n")
        raise UserError(f"{self.path} is being trained by process 1; wait for it to finish or choose another --out")

    monkeypatch.setattr(RunDir, "lock", held)
    assert fresh(data, tmp_path / "run", "--epochs", "1") == 2
    assert (tmp_path / "run" / "the other trainer's file").read_text() == "mine\n"


def test_an_epoch_too_small_for_one_step_is_refused(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=6)
    one_line_error(
        capsys,
        [
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "run"),
            "--batch-size",
            "8",
            "--accumulate",
            "2",
            *TINY_MODEL,
        ],
        "fewer batches than one optimizer step takes (--accumulate 2 x 1 process(es))",
    )
    assert not (tmp_path / "run").exists()


def test_resume_accepts_the_saved_value_given_again(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    assert train("--out", str(run), "--resume", "--d-model", "32", "--lr-factor", "0.5", "--epochs", "2") == 0
    assert len(read_jsonl(run / "metrics.jsonl")) == 2


def test_config_file_then_flags(data, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model:\n  d_model: 32\n  heads: 2\n  d_ff: 64\n  layers: 1\n"
        f"train:\n  task: parallel\n  data_dir: {data}\n  epochs: 1\n  batch_size: 32\n"
    )
    run = tmp_path / "run"
    assert train("--config", str(config), "--heads", "4", "--out", str(run), "--quiet") == 0
    saved = json.loads((run / "config.json").read_text())
    assert (saved["model"]["d_model"], saved["model"]["heads"], saved["train"]["batch_size"]) == (32, 4, 32)
    again = tmp_path / "again"  # a run's config.json is itself a valid --config
    assert train("--config", str(run / "config.json"), "--out", str(again), "--quiet") == 0
    assert json.loads((again / "config.json").read_text())["model"] == saved["model"]


@pytest.mark.parametrize(
    "section,line,flag,kind",
    [
        ("model", "layers: two", "--layers", "a whole number"),
        ("model", "layers: 1.5", "--layers", "a whole number"),
        ("train", "epochs: three", "--epochs", "a whole number"),
        ("train", "lr_factor: [1]", "--lr-factor", "a number"),
        ("model", "norm_first: 'yes'", "--norm-first", "true or false"),
    ],
)
def test_a_config_file_value_of_the_wrong_kind_is_a_one_line_error(tmp_path, capsys, section, line, flag, kind):
    config = tmp_path / "run.yaml"
    config.write_text(f"{section}:\n  {line}\n")
    run = tmp_path / "run"
    one_line_error(capsys, ["train", "--config", str(config), "--out", str(run)], flag, f"must be {kind}")
    assert not run.exists()


# ---- crash windows --------------------------------------------------------------------------
def test_best_is_never_behind_what_last_records(data, tmp_path, monkeypatch):
    """A crash after the best checkpoint is written and before the last one: resuming repeats
    the epoch and leaves the pair consistent."""
    run = tmp_path / "run"
    real_save = checkpoint.save_atomic
    writes = []

    def crash_on_second_epoch_last(state, path):
        writes.append(path.name)
        if state["progress"]["epoch"] == 2 and path.name == LAST:
            raise KeyboardInterrupt  # the process dies here
        real_save(state, path)

    monkeypatch.setattr(checkpoint, "save_atomic", crash_on_second_epoch_last)
    assert fresh(data, run, "--epochs", "2", "--select-by", "loss") == 130
    monkeypatch.setattr(checkpoint, "save_atomic", real_save)
    assert writes.index(BEST, 2) < writes.index(LAST, 2)  # epoch 2: best first
    assert train("--out", str(run), "--resume") == 0
    last, best = checkpoint.load(run / LAST), checkpoint.load(run / BEST)
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["epoch"] for m in metrics] == [1, 2]
    best_epoch = min(metrics, key=lambda m: m["valid_loss"])
    assert last["progress"]["best"] == best["progress"]["best"] == best_epoch["valid_loss"]
    assert best["progress"]["epoch"] == best_epoch["epoch"]


def test_resume_clears_temporaries_and_a_torn_log_line(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / ".checkpoint_last.pt.tmp-424242").write_bytes(b"half a checkpoint")
    with open(run / "steps.jsonl", "a") as f:
        f.write('{"step": 99, "epo')  # a crash in the middle of a line
    assert train("--out", str(run), "--resume", "--epochs", "2") == 0
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]
    steps = read_jsonl(run / "steps.jsonl")  # every line parses
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))


def test_a_second_trainer_on_the_same_run_is_refused(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    holder = RunDir(run)
    holder.lock()
    try:
        before = snapshot(run)
        one_line_error(capsys, ["train", "--out", str(run), "--resume", "--epochs", "2"], "is being trained by process")
        assert snapshot(run) == before
    finally:
        holder.unlock()
    assert train("--out", str(run), "--resume", "--epochs", "2") == 0  # free again


def _damage_checkpoint(run):
    (run / LAST).write_bytes(torch.randint(0, 256, (5000,), dtype=torch.uint8).numpy().tobytes())


def _damage_vocab(run):
    (run / "vocab.json").write_text("{not json")


def _put_another_models_checkpoint(run):
    state = checkpoint.load(run / LAST)
    state["model_config"]["d_ff"] *= 2
    checkpoint.save_atomic({k: v for k, v in state.items() if k != "format"}, run / LAST)


@pytest.mark.parametrize("lock", [b"process 424242\n", None], ids=["lock of an earlier trainer", "no lock"])
@pytest.mark.parametrize(
    "damage,needle",
    [
        (_damage_checkpoint, "checkpoint_last.pt is"),
        (_damage_vocab, "vocab.json is not valid JSON"),
        (_put_another_models_checkpoint, "holds another model"),
    ],
    ids=["damaged checkpoint", "garbage vocabulary", "another model's checkpoint"],
)
def test_a_refused_resume_leaves_the_run_directory_as_it_was(trained, tmp_path, capsys, lock, damage, needle):
    """The run is not locked (which writes this process's id into .lock) before it is known to resume."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / ".lock").unlink()
    if lock is not None:
        (run / ".lock").write_bytes(lock)
    damage(run)
    before = snapshot(run)
    one_line_error(capsys, ["train", "--out", str(run), "--resume", "--epochs", "2"], needle)
    assert snapshot(run) == before


def test_resuming_a_run_still_training_before_its_first_checkpoint_names_the_trainer(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for name in (LAST, BEST):
        (run / name).unlink()  # as early in a first epoch
    holder = RunDir(run)
    holder.lock()
    try:
        one_line_error(capsys, ["train", "--out", str(run), "--resume"], "is being trained by process")
    finally:
        holder.unlock()


def test_overflowing_loss_stops_with_a_usable_checkpoint(data, tmp_path, capsys):
    run = tmp_path / "run"
    err = one_line_error(
        capsys,
        [
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(run),
            "--batch-size",
            "16",
            "--lr-factor",
            "1e30",
            "--warmup",
            "1",
            "--epochs",
            "3",
            *TINY_MODEL,
        ],
        "the loss became",
    )
    assert "checkpoint_last.pt holds the weights before that step" in err
    state = checkpoint.load(run / LAST)
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    for record in read_jsonl(run / "steps.jsonl"):  # valid JSON: no NaN literals
        assert record["loss"] is None or record["loss"] == record["loss"]
    assert main(["evaluate", str(run), "--checkpoint", "last", "--beam", "1", "--json"]) == 0


# ---- bad input: one line, exit 2, nothing changed --------------------------------------------
@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--lr-factor", "-1"], "--lr-factor must be above 0, got -1"),
        (["--lr-factor", "0"], "--lr-factor must be above 0, got 0"),
        (["--lr-factor", "nan"], "--lr-factor must be a finite number"),
        (["--warmup", "inf"], "invalid int value"),
        (["--label-smoothing", "1"], "--label-smoothing must be in [0, 1)"),
        (["--threads", "-1"], "--threads must be at least 1"),
        (["--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N"),
        (["--dec-attention", "window:2"], "causal"),
        (["--d-model", "30", "--heads", "4"], "--d-model (30) must be divisible by the number of heads (4)"),
        (["--epoch", "2"], "unrecognized arguments: --epoch 2"),
    ],
)
def test_bad_training_options_write_nothing(data, tmp_path, capsys, argv, needle):
    run = tmp_path / "fresh"
    code = None
    try:
        code = main(["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), *TINY_MODEL, *argv])
    except SystemExit as exit_info:  # argparse's own errors
        code = exit_info.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert not run.exists()


def test_out_naming_a_file(data, tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    one_line_error(
        capsys,
        ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(tmp_path / "file"), *TINY_MODEL],
        "is a file, not a directory",
    )
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_cuda_without_a_gpu(trained, capsys, command):
    one_line_error(capsys, [command, str(trained), "--device", "cuda"], "--device cuda: no CUDA device is visible")


def test_damaged_run_files_are_named(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for name in (BEST, LAST):
        (run / name).write_bytes(torch.randint(0, 256, (5000,), dtype=torch.uint8).numpy().tobytes())
    one_line_error(capsys, ["evaluate", str(run)], "damaged")

    run = tmp_path / "no_model"
    shutil.copytree(trained, run)
    (run / "config.json").write_text(json.dumps({"train": {}}))
    one_line_error(capsys, ["evaluate", str(run)], "config.json", '"model"')
    (run / "config.json").write_text("{not json")
    one_line_error(capsys, ["evaluate", str(run)], "config.json is not valid JSON")
    one_line_error(capsys, ["train", "--out", str(run), "--resume"], "config.json is not valid JSON")


def test_translate_input_that_is_not_a_file(trained, tmp_path, capsys):
    one_line_error(capsys, ["translate", str(trained), "--input", str(tmp_path / "missing.txt")], "not found")
    one_line_error(capsys, ["translate", str(trained), "--input", str(tmp_path)], "a directory")


def test_translate_warns_about_unknown_tokens(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b zebra\nzebra quokka\n")
    assert main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--beam", "1"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert "3 input tokens (2 distinct) are not in the vocabulary" in captured.err and "zebra, quokka" in captured.err


@pytest.mark.parametrize("command", ["animate", "heatmap"])
def test_viz_output_into_a_missing_folder(trained, tmp_path, capsys, command):
    one_line_error(capsys, [command, str(trained), "-o", str(tmp_path / "nowhere" / "x.png")], "does not exist")


def test_a_damaged_attention_record_is_named(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "1", "--viz-every", "1") == 0
    record = sorted((run / "attention").glob("epoch_*.pt"))[-1]
    record.write_bytes(record.read_bytes()[:100])
    one_line_error(capsys, ["heatmap", str(run), "-o", str(tmp_path / "x.png")], record.name, "damaged or truncated")
    assert not (tmp_path / "x.png").exists()


# ---- found by a review of the training code ----------------------------------------------
def test_a_run_with_a_relative_data_dir_is_evaluated_and_resumed_from_any_folder(data, tmp_path, monkeypatch, capsys):
    shutil.copytree(data, tmp_path / "mine")
    monkeypatch.chdir(tmp_path)
    assert fresh("mine", "run", "--epochs", "1") == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["data_dir"] == str(tmp_path / "mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "run"), "--split", "valid", "--beam", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 40
    monkeypatch.chdir(tmp_path)  # the same relative path given again on resume is the same folder
    assert train("--out", "run", "--resume", "--epochs", "2", "--data-dir", "mine") == 0
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["epoch"] == 2


def test_samples_longer_than_max_len_are_refused_in_one_line_at_start_and_at_evaluate(data, tmp_path, capsys):
    long = tmp_path / "long"
    shutil.copytree(data, long)
    with open(long / "test.src", "a") as src, open(long / "test.tgt", "a") as tgt:
        src.write(" ".join(["a"] * 30) + "\n")
        tgt.write("a\n")
    one_line_error(
        capsys,
        [
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(long),
            "--out",
            str(tmp_path / "run"),
            "--max-len",
            "24",
            *TINY_MODEL,
        ],
        "test.src line 41 has 30 tokens",
    )
    assert not (tmp_path / "run").exists()
    run = tmp_path / "fits"
    assert fresh(data, run, "--epochs", "1", "--max-len", "24") == 0
    one_line_error(capsys, ["evaluate", str(run), "--split", "test", "--data-dir", str(long)], "test.src line 41")
    state = checkpoint.load(run / BEST)  # the run's own data folder, changed after training:
    state["train_config"]["data_dir"] = str(long)
    checkpoint.save_atomic(state, run / BEST)
    one_line_error(capsys, ["evaluate", str(run), "--split", "test"], "max_len (24) is shorter than the data")


def test_a_new_run_where_a_killed_one_left_no_checkpoint_starts_with_empty_records(data, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # the killed run's: it had started
    (run / "steps.jsonl").write_text('{"step": 1, "epoch": 0, "loss": 9.0}\n' * 3)
    (run / "metrics.jsonl").write_text('{"epoch": 1, "step": 3}\n')
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "epoch_0007.pt").write_bytes(b"old")
    assert fresh(data, run, "--epochs", "1") == 0
    assert [r["step"] for r in read_jsonl(run / "steps.jsonl")] == list(range(1, 7))
    assert [r["epoch"] for r in read_jsonl(run / "metrics.jsonl")] == [1]
    assert not (run / "checkpoints").exists()


def test_a_step_limit_on_an_epochs_last_step_still_validates_that_epoch(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "3", "--max-steps", "12") == 0  # 6 steps an epoch
    assert [m["epoch"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]
    last = checkpoint.load(run / LAST)["progress"]
    assert (last["epoch"], last["batch"], last["step"]) == (2, 0, 12)
    assert "stopped at step 12, 2 of 3 epochs complete (valid loss" in capsys.readouterr().out
    assert train("--out", str(run), "--resume", "--max-steps", "18") == 0
    assert [m["epoch"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]


def test_a_runs_config_json_with_the_other_batch_option_or_task(trained, tmp_path):
    run = tmp_path / "run"
    assert train("--config", str(trained / "config.json"), "--batch-tokens", "300", "--out", str(run)) == 0
    saved = json.loads((run / "config.json").read_text())["train"]
    assert (saved["batch_size"], saved["batch_tokens"]) == (None, 300)
    assert json.loads((trained / "config.json").read_text())["train"]["select_by"] == "loss"  # parallel's
    copy = tmp_path / "copy"
    assert (
        train(
            "--config",
            str(trained / "config.json"),
            "--task",
            "copy",
            "--data-dir",
            str(tmp_path / "gen"),
            "--max-steps",
            "1",
            "--out",
            str(copy),
        )
        == 0
    )
    assert json.loads((copy / "config.json").read_text())["train"]["select_by"] == "exact_match"  # copy's


@pytest.mark.parametrize(
    "text,section", [("model: 5\n", "'model' must be a mapping"), ("train: [epochs]\n", "'train' must be a mapping")]
)
def test_a_config_section_that_is_not_a_mapping_is_a_one_line_error(tmp_path, capsys, text, section):
    (tmp_path / "bad.yaml").write_text(text)
    one_line_error(capsys, ["train", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "run")], section)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "text",
    ["foo:\n  layers: 1\nmodel:\n  layers: 1\n", "foo:\n  layers: 1\n"],
    ids=["beside model", "instead of model"],
)
def test_an_unknown_config_section_is_named(tmp_path, capsys, text):
    (tmp_path / "bad.yaml").write_text(text)
    err = one_line_error(
        capsys, ["train", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "run")], "'foo'"
    )
    assert "'model'" in err and "'train'" in err, err  # the sections it may hold
    assert not (tmp_path / "run").exists()


# A slip names where it is: a config file's line, the name a misspelt one was likely meant to be.
SLIPS = {
    "indent.yaml": "model:\n  layers: 1\n   heads: 4\n",  # heads one space deeper than layers
    "tab.yaml": "model:\n\tlayers: 1\n",
    "key.yaml": "model:\n  layer: 1\n",
    "section.yaml": "modle:\n  layers: 1\n",
    "choice.yaml": "train:\n  attention_backend: torhc\n",
}


@pytest.mark.parametrize(
    "argv,needles",
    [
        (
            ["--epoch", "2"],
            ["unrecognized arguments: --epoch 2 (did you mean --epochs?); see graphformer train --help"],
        ),
        (["--d-modle=32"], ["unrecognized arguments: --d-modle=32 (did you mean --d-model?)"]),
        (["--task", "cpy"], ["argument --task: invalid choice: 'cpy' (did you mean copy?); choose from copy,"]),
        (["--attention-backend", "torhc"], ["invalid choice: 'torhc' (did you mean torch?)"]),
        (["--enc-attention", "windw:8"], ["unknown attention pattern 'windw:8' (did you mean window?); known:"]),
        (["--dec-attention", "causal-windw:2"], ["'causal-windw:2' (did you mean causal-window?)"]),
        (["--enc-attention", "window:1+parse-tre"], ["'parse-tre' (did you mean parse-tree?)"]),
        (["--config", "indent.yaml"], ["indent.yaml, line 3, column 9 is not valid YAML", "indentation"]),
        (["--config", "tab.yaml"], ["tab.yaml, line 2, column 1 is not valid YAML", "'\\t'"]),
        (
            ["--config", "key.yaml"],
            ["model.layer is not an option (did you mean layers?); see graphformer train --help"],
        ),
        (["--config", "section.yaml"], ["'modle' is not a section (did you mean model?)"]),
        (["--config", "choice.yaml"], ["--attention-backend must be one of", "got 'torhc' (did you mean torch?)"]),
    ],
)
@pytest.mark.parametrize("where", ["new folder", "existing run"])
def test_a_slip_is_one_line_that_names_where_and_what_was_meant_and_writes_nothing(
    data, trained, tmp_path, capsys, argv, needles, where
):
    for name, text in SLIPS.items():
        (tmp_path / name).write_text(text)
    run = tmp_path / "run"
    if where == "existing run":
        shutil.copytree(trained, run)
    before = snapshot(run) if run.exists() else None
    argv = [str(tmp_path / word) if word in SLIPS else word for word in argv]
    try:
        code = fresh(data, run, *argv)
    except SystemExit as exit_info:  # argparse's own errors
        code = exit_info.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert all(needle in err for needle in needles), err
    assert (snapshot(run) if run.exists() else None) == before


def test_a_misspelt_command_or_choice_of_another_command_gets_the_likely_name(trained, capsys):
    before = snapshot(trained)
    for argv, needle in (
        (["trian", "--out", str(trained)], "invalid choice: 'trian' (did you mean train?)"),
        (["evaluate", str(trained), "--split", "tset"], "invalid choice: 'tset' (did you mean test?)"),
        (["evaluate", str(trained), "--bem", "2"], "--bem 2 (did you mean --beam?)"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert snapshot(trained) == before


def test_a_misspelt_task_in_a_config_file_gets_the_likely_name(tmp_path, capsys):
    (tmp_path / "run.yaml").write_text("train:\n  task: cpy\n")
    argv = ["train", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "run")]
    one_line_error(capsys, argv, "--task must be one of", "got 'cpy' (did you mean copy?)")
    assert not (tmp_path / "run").exists()


def test_a_name_close_to_no_known_one_gets_no_guess(data, tmp_path, capsys):
    for argv in (["--task", "palindrome"], ["--enc-attention", "zigzag:3"], ["--frobnicate"]):
        try:
            code = fresh(data, tmp_path / "run", *argv)
        except SystemExit as exit_info:
            code = exit_info.code
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "did you mean" not in err, err
    assert not (tmp_path / "run").exists()


def test_tie_all_needs_one_vocabulary_not_two_of_one_size(tmp_path, capsys):
    data = tmp_path / "upper"
    data.mkdir()
    for split in ("train", "valid", "test"):
        lines = ["a b c", "c b a", "b c"] * 8
        (data / f"{split}.src").write_text("\n".join(lines) + "\n")
        (data / f"{split}.tgt").write_text("\n".join(x.upper() for x in lines) + "\n")
    one_line_error(
        capsys,
        [
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--no-shared-vocab",
            "--tie",
            "all",
            "--out",
            str(tmp_path / "run"),
            *TINY_MODEL,
        ],
        "--tie 'all' shares one embedding",
    )
    assert not (tmp_path / "run").exists()


def test_generated_data_of_another_seed_is_used_with_a_warning(tmp_path, capsys):
    small_copy_data(tmp_path / "gen", n_train=48, seed=1)
    before = (tmp_path / "gen" / "train.src").read_text()
    assert (
        train(
            "--task",
            "copy",
            "--data-dir",
            str(tmp_path / "gen"),
            "--seed",
            "2",
            "--max-steps",
            "1",
            "--out",
            str(tmp_path / "run"),
            *TINY_MODEL,
        )
        == 0
    )
    assert "was generated with seed 1; training on it as it is" in capsys.readouterr().err
    assert (tmp_path / "gen" / "train.src").read_text() == before


@pytest.mark.parametrize(
    "flag,value,needle",
    [
        ("--epochs", "1", "--epochs 1 is fewer than the 2 epochs"),
        ("--max-steps", "5", "--max-steps 5 is fewer than the 12 steps"),
    ],
)
def test_resume_refuses_limits_below_what_the_run_has_done(data, tmp_path, capsys, flag, value, needle):
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "2") == 0
    before = snapshot(run)
    one_line_error(capsys, ["train", "--out", str(run), "--resume", flag, value], needle)
    assert snapshot(run) == before  # config.json still says what the run did


def test_evaluate_warns_when_a_folders_tokens_are_not_the_runs(trained, tmp_path, capsys):
    """The warning names the run's own data folder, and needs it not to exist."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    config = json.loads((run / "config.json").read_text())
    state = checkpoint.load(run / BEST)
    state["train_config"]["data_dir"] = config["train"]["data_dir"] = str(tmp_path / "gone")
    checkpoint.save_atomic(state, run / BEST)
    (run / "config.json").write_text(json.dumps(config))
    trained = run
    other = tmp_path / "other"
    other.mkdir()
    (other / "valid.src").write_text("a b zz\nyy\n")  # zz, yy and ww are no copy-task tokens
    (other / "valid.tgt").write_text("a b zz\nww\n")
    assert main(["evaluate", str(trained), "--split", "valid", "--data-dir", str(other), "--beam", "1"]) == 0
    err = capsys.readouterr().err
    assert "4 of the 8 tokens in" in err and "read as <unk>" in err


def test_a_generated_tasks_folder_of_files_no_generator_made_is_used_with_a_warning(data, tmp_path, capsys):
    mine = tmp_path / "mine"
    shutil.copytree(data, mine)
    (mine / "generated.json").unlink()
    assert (
        train(
            "--task", "copy", "--data-dir", str(mine), "--max-steps", "1", "--out", str(tmp_path / "run"), *TINY_MODEL
        )
        == 0
    )
    assert "has no record of a generator (generated.json)" in capsys.readouterr().err


def test_a_min_count_that_leaves_no_word_is_a_one_line_error(data, tmp_path, capsys):
    one_line_error(
        capsys,
        [
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "run"),
            "--min-count",
            "100000",
            *TINY_MODEL,
        ],
        "--min-count (100000) is more than any",
    )
    assert not (tmp_path / "run").exists()


def test_a_new_run_in_a_folder_of_the_users_removes_nothing(data, tmp_path, capsys):
    """Only a killed run's records are cleared (its config.json says it was one); and a refused
    start clears nothing."""
    out = tmp_path / "mine"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "events.other").write_text("x")
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "model.bin").write_text("y")
    one_line_error(
        capsys,
        ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(out), "--max-len", "5", *TINY_MODEL],
        "--max-len (5) is shorter",
    )
    assert fresh(data, out, "--epochs", "1") == 0
    assert (out / "tensorboard" / "events.other").read_text() == "x"
    assert (out / "checkpoints" / "model.bin").read_text() == "y"


def test_a_run_whose_saved_epochs_are_below_its_progress_still_resumes(data, tmp_path):
    """An earlier version let --resume --epochs lower the saved value: such a run is done."""
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "2") == 0
    config = json.loads((run / "config.json").read_text())
    config["train"]["epochs"] = 1
    (run / "config.json").write_text(json.dumps(config))
    assert train("--out", str(run), "--resume") == 0


def test_a_hand_written_config_keeps_its_select_by_whatever_the_task(data, tmp_path):
    (tmp_path / "sel.yaml").write_text("train:\n  select_by: exact_match\n  epochs: 1\n")
    run = tmp_path / "run"
    assert (
        train(
            "--config",
            str(tmp_path / "sel.yaml"),
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(run),
            "--batch-size",
            "16",
            *TINY_MODEL,
        )
        == 0
    )
    assert json.loads((run / "config.json").read_text())["train"]["select_by"] == "exact_match"


def test_a_killed_runs_data_of_another_seed_is_used_with_a_warning(tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--task", "copy", "--out", str(run), "--seed", "1", "--max-steps", "1", *TINY_MODEL) == 0
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        (run / name).unlink(missing_ok=True)  # killed before its first checkpoint
    capsys.readouterr()
    assert train("--task", "copy", "--out", str(run), "--seed", "2", "--max-steps", "1", *TINY_MODEL) == 0
    assert f"the data in {run / 'data'} was generated with seed 1" in capsys.readouterr().err


def test_a_run_stopped_after_an_epochs_last_step_validates_it_on_resume(data, tmp_path, monkeypatch):
    """A signal (or a kill after a --save-every checkpoint) on the last step of an epoch that is
    also the last of --max-steps: the resumed run validates that epoch, as the uninterrupted one."""
    import graphformer.training.trainer as trainer_module

    run = tmp_path / "run"
    original = trainer_module.Trainer.should_stop

    def signal_at_step_6(self):
        self.stop.requested = self.stop.requested or self.progress.step == 6
        return original(self)

    monkeypatch.setattr(trainer_module.Trainer, "should_stop", signal_at_step_6)
    assert fresh(data, run, "--epochs", "3", "--max-steps", "6") == 130  # 6 steps an epoch: interrupted on its last
    monkeypatch.setattr(trainer_module.Trainer, "should_stop", original)
    assert not (run / "metrics.jsonl").exists() or read_jsonl(run / "metrics.jsonl") == []
    assert train("--out", str(run), "--resume") == 0
    assert [m["epoch"] for m in read_jsonl(run / "metrics.jsonl")] == [1]
    assert checkpoint.load(run / BEST)["progress"]["epoch"] == 1


def test_resume_removes_temporaries_in_the_runs_subfolders(data, tmp_path):
    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "1", "--keep-last", "1", "--viz-every", "1") == 0
    left = [run / "checkpoints" / ".epoch_0002.pt.tmp-123", run / "attention" / ".epoch_0002.pt.tmp-123"]
    for path in left:
        path.write_bytes(b"half a checkpoint")
    assert train("--out", str(run), "--resume", "--epochs", "2") == 0
    assert not any(path.exists() for path in left)


def test_tensorboard_drops_steps_logged_after_the_checkpoint_a_run_resumes_from(data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert fresh(data, run, "--epochs", "2", "--max-steps", "3", "--tensorboard") == 0
    at_step_3 = (run / LAST).read_bytes()
    assert train("--out", str(run), "--resume", "--max-steps", "5") == 0
    (run / LAST).write_bytes(at_step_3)  # a crash after step 5 whose last checkpoint was step 3
    assert train("--out", str(run), "--resume", "--max-steps", "5") == 0
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5]


def test_a_crash_between_the_epoch_checkpoint_and_the_last_one_leaves_no_gap(data, tmp_path, monkeypatch):
    """The epoch's own checkpoint is written first: a crash before checkpoint_last.pt resumes from
    the epoch before and writes it again, so `average --last` never meets a missing epoch."""
    from graphformer.training.run_dir import RunDir

    run = tmp_path / "run"
    original = RunDir.save_checkpoint

    def disk_full_at_epoch_2(self, state, best):
        if state["progress"]["epoch"] == 2:
            raise OSError(28, "No space left on device")
        return original(self, state, best)

    monkeypatch.setattr(RunDir, "save_checkpoint", disk_full_at_epoch_2)
    assert fresh(data, run, "--epochs", "3", "--keep-last", "5") == 2
    assert (run / "checkpoints" / "epoch_0002.pt").exists()
    monkeypatch.setattr(RunDir, "save_checkpoint", original)
    assert train("--out", str(run), "--resume") == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"epoch_000{e}.pt" for e in (1, 2, 3)]


def test_a_checkpoint_that_cannot_be_written_at_a_stop_is_the_only_line(data, tmp_path, capsys, monkeypatch):
    """Progress on (no --quiet, stderr not a terminal): a run stopped by --max-steps shows its last
    step, unless writing the stop's checkpoint fails; then the error is the only line."""
    import errno

    from graphformer.training.trainer import Trainer

    run = tmp_path / "run"
    options = [t for t in TINY_MODEL if t != "--quiet"]
    assert (
        train(
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(run),
            "--batch-size",
            "8",
            "--max-steps",
            "2",
            *options,
        )
        == 0
    )
    assert "step 2/" in capsys.readouterr().err

    def full_disk(self):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.run_dir / "checkpoint_last.pt"))

    monkeypatch.setattr(Trainer, "save", full_disk)
    code = train(
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--out",
        str(tmp_path / "run2"),
        "--batch-size",
        "8",
        "--max-steps",
        "2",
        *options,
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("graphformer: error: ") and "No space left" in err, err
