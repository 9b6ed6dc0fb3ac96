"""The run directory (`graphformer.training.run_dir`): its lock, its logs cut back to a
checkpoint, what a new run clears, the kept epoch checkpoints, finding a checkpoint, and the
command that continues a run."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from graphformer.errors import UserError
from graphformer.training import checkpoint
from graphformer.training.run_dir import (
    ATTENTION,
    AVERAGED,
    BEST,
    CONFIG,
    EPOCHS,
    LAST,
    LOCK,
    METRICS,
    STEPS,
    TENSORBOARD,
    RunClaim,
    RunDir,
    check_run_dir,
    find_checkpoint,
    resume_command,
)

HOLD_LOCK = """
import sys
from graphformer.training.run_dir import RunDir
run = RunDir(sys.argv[1])  # held while this object lives
run.lock()
print("locked", flush=True)
sys.stdin.read()  # hold it until the test closes stdin
"""


@pytest.fixture
def run(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    return run


def write_lines(path, *lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_a_run_held_by_another_process_is_refused_naming_that_process(run):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        assert run.trainer() == f"process {holder.pid}"
        with pytest.raises(UserError) as refused:
            run.lock()
        assert f"process {holder.pid}" in str(refused.value) and str(run.path) in str(refused.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert run.trainer() is None  # released when its holder exits
    run.lock()
    try:
        assert RunDir(run.path).trainer() == f"process {os.getpid()}"
    finally:
        run.unlock()
    assert run.trainer() is None


def test_locking_clears_what_interrupted_writes_left_and_keeps_the_rest(run):
    (run.path / EPOCHS).mkdir()
    left = [run.path / f".{LAST}.tmp-424242", run.path / EPOCHS / ".epoch_0001.pt.tmp-424242"]
    for path in left:
        path.write_bytes(b"half a file")
    (run.path / LAST).write_bytes(b"a whole file")
    run.lock()
    run.unlock()
    assert not any(path.exists() for path in left)
    assert (run.path / LAST).read_bytes() == b"a whole file"


def test_cut_logs_drops_records_past_the_checkpoint_and_a_torn_last_line(run):
    write_lines(run / STEPS, *(json.dumps({"step": s, "epoch": (s - 1) // 3}) for s in range(1, 8)))
    with open(run / STEPS, "a") as f:
        f.write('{"step": 8, "lo')  # a crash in the middle of a line
    write_lines(run / METRICS, *(json.dumps({"epoch": e, "step": 3 * e}) for e in (1, 2)))
    run.cut_logs(step=4, epoch=1)
    assert [record["step"] for _, record in run.records(STEPS)] == [1, 2, 3, 4]
    assert [record["epoch"] for _, record in run.records(METRICS)] == [1]
    assert (run / STEPS).read_text().endswith("}\n")  # whole lines only: the next record starts a line


def test_cut_logs_passes_over_logs_a_run_has_not_written(run):
    run.cut_logs(step=3, epoch=1)
    assert not (run / STEPS).exists() and not (run / METRICS).exists()


def test_records_skip_a_torn_last_line_and_refuse_a_broken_one_before_it(run):
    write_lines(run / STEPS, '{"step": 1}', '{"step": 2}')
    with open(run / STEPS, "a") as f:
        f.write('{"step": 3, "lo')
    assert [record for _, record in run.records(STEPS)] == [{"step": 1}, {"step": 2}]
    write_lines(run / STEPS, '{"step": 1}', "not json", '{"step": 3}')
    with pytest.raises(UserError) as refused:
        run.records(STEPS)
    assert "line 2" in str(refused.value) and str(run / STEPS) in str(refused.value)
    write_lines(run / STEPS, '{"step": 1}', "[2]", '{"step": 3}')
    with pytest.raises(UserError, match="line 2 is not a JSON object"):
        run.records(STEPS)


def test_a_log_without_a_file_has_no_records(run):
    assert run.records(METRICS) == []


def test_non_finite_numbers_are_logged_as_null(run):
    run.log(STEPS, {"step": 1, "loss": math.nan, "lr": math.inf})
    run.log(STEPS, {"step": 2, "loss": 0.5, "lr": 1e-3})
    assert [record for _, record in run.records(STEPS)] == [
        {"step": 1, "loss": None, "lr": None},
        {"step": 2, "loss": 0.5, "lr": 1e-3},
    ]


def make_earlier_run(run):
    """What a run killed before its first checkpoint leaves: records, and data to keep."""
    (run / CONFIG).write_text("{}")
    for name in (STEPS, METRICS, AVERAGED, "subwords.model"):
        (run / name).write_text("x")
    for folder in (EPOCHS, ATTENTION, TENSORBOARD, "data"):
        (run / folder).mkdir()
        (run / folder / "file").write_text("x")


def test_clear_records_starts_a_new_run_empty_and_keeps_its_data(run):
    make_earlier_run(run)
    run.clear_records()
    left = sorted(p.relative_to(run.path).as_posix() for p in run.path.rglob("*"))
    assert left == [CONFIG, "data", "data/file", "subwords.model"]


def test_clear_records_leaves_a_folder_that_held_no_run_alone(run):
    make_earlier_run(run)
    (run / CONFIG).unlink()  # without config.json the files are the user's, not a run's
    before = sorted(run.path.rglob("*"))
    run.clear_records()
    assert sorted(run.path.rglob("*")) == before


def test_keep_epoch_checkpoint_never_holds_more_than_keep_last(run, monkeypatch):
    on_disk_at_write = []
    save = checkpoint.save_atomic

    def counting_save(state, path):
        on_disk_at_write.append(len(run.epoch_checkpoints()))
        save(state, path)

    monkeypatch.setattr(checkpoint, "save_atomic", counting_save)
    for epoch in range(1, 7):
        run.keep_epoch_checkpoint({"epoch": epoch}, epoch, keep_last=3)
        assert len(run.epoch_checkpoints()) == min(epoch, 3)
    assert max(on_disk_at_write) <= 2  # the oldest goes before the newest is written
    run.keep_epoch_checkpoint({"epoch": 6, "again": True}, 6, keep_last=3)  # a resumed run writes epoch 6 again
    assert [checkpoint.load(p)["epoch"] for p in run.epoch_checkpoints()] == [4, 5, 6]
    assert checkpoint.load(run.epoch_checkpoints()[-1])["again"]


def test_the_best_checkpoint_is_on_disk_before_the_last_one_that_speaks_of_it(run, monkeypatch):
    written = []
    monkeypatch.setattr(checkpoint, "save_atomic", lambda state, path: written.append(path.name))
    run.save_checkpoint({}, best=True)
    run.save_checkpoint({}, best=False)
    assert written == [BEST, LAST, LAST]


def test_recorded_attention_is_listed_by_epoch(run):
    for epoch in (10, 2, 0):
        path = run.save_attention({"epoch": epoch, "maps": torch.zeros(1)}, epoch)
        assert path.parent == run / ATTENTION
    assert [checkpoint.load(p)["epoch"] for p in run.attention_files()] == [0, 2, 10]


def test_a_run_owns_its_files_and_everything_in_its_folders(run, tmp_path):
    (run / METRICS).write_text("")
    assert run.owns(run / METRICS)
    assert run.owns(run / EPOCHS / "epoch_0001.pt") and run.owns(run / ATTENTION / "new.pt")  # not there yet
    assert not run.owns(run / "my_average.pt")
    assert not run.owns(tmp_path / "elsewhere.pt")


def test_holds_run_once_a_checkpoint_is_written(run):
    assert not run.holds_run()
    (run / CONFIG).write_text("{}")  # a run killed before its first checkpoint may be replaced
    assert not run.holds_run()
    checkpoint.save_atomic({}, run / LAST)
    assert run.holds_run()


def test_read_config_names_the_file_that_is_not_a_run_configuration(run):
    (run / CONFIG).write_text('{"model": {}}')
    with pytest.raises(UserError) as refused:
        run.read_config()
    assert str(run / CONFIG) in str(refused.value) and '"train"' in str(refused.value)
    (run / CONFIG).write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        run.read_config()
    (run / CONFIG).write_text(json.dumps({"model": {"layers": 2}, "train": {"epochs": 3}}))
    assert run.read_config() == ({"layers": 2}, {"epochs": 3})


def test_find_checkpoint_falls_back_to_the_other_of_best_and_last(run):
    checkpoint.save_atomic({}, run / LAST)
    assert find_checkpoint(run.path, "best") == run / LAST
    checkpoint.save_atomic({}, run / BEST)
    assert find_checkpoint(run.path, "best") == run / BEST
    assert find_checkpoint(run.path, "last") == run / LAST
    assert find_checkpoint(run.path, str(run / BEST)) == run / BEST  # a file, named


@pytest.mark.parametrize(
    "config,which,needles",
    [
        (False, "best", [CONFIG, "not a run directory"]),
        (True, "best", ["no checkpoint", "graphformer train --out"]),
        (True, "averaged", [AVERAGED, "graphformer average"]),
        (True, EPOCHS, ["is a folder"]),
    ],
)
def test_find_checkpoint_says_what_is_missing(run, config, which, needles):
    if config:
        (run / CONFIG).write_text("{}")
    (run / EPOCHS).mkdir()
    with pytest.raises(UserError) as refused:
        find_checkpoint(run.path, str(run / which) if which == EPOCHS else which)
    assert all(needle in str(refused.value) for needle in needles), str(refused.value)


def test_check_run_dir_refuses_a_file_and_a_missing_folder(tmp_path):
    (tmp_path / "file").write_text("")
    for path, needle in ((tmp_path / "file", "is a file"), (tmp_path / "missing", "does not exist")):
        with pytest.raises(UserError) as refused:
            check_run_dir(path)
        assert str(path) in str(refused.value) and needle in str(refused.value)
    assert check_run_dir(str(tmp_path)) == tmp_path


def test_the_command_that_continues_a_run_names_how_it_is_launched():
    assert resume_command("runs/a") == "graphformer train --out runs/a --resume"
    assert resume_command("runs/a", 2) == "graphformer train --processes 2 --out runs/a --resume"
    across = resume_command("runs/a", 4, 2)
    assert across.startswith("torchrun --nnodes=2 --nproc_per_node=2 ... -m graphformer train")
    assert across.endswith("--out runs/a --resume") and "--processes" not in across  # torchrun starts them


def test_a_claim_given_back_leaves_a_folder_as_the_claim_found_it(tmp_path):
    """A refused start removes the folder it made; in a folder that was there it deletes the lock
    file it made and keeps one that was there; a process past the first makes nothing."""
    claim = RunClaim(RunDir(tmp_path / "new"), is_main=True)
    claim.take()
    assert (tmp_path / "new" / LOCK).is_file()
    claim.give_back()
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for had_lock in (False, True):
        claim = RunClaim(RunDir(mine), is_main=True)
        claim.take()
        assert (mine / LOCK).is_file()
        claim.give_back()
        assert sorted(p.name for p in mine.iterdir()) == sorted(["notes.txt", *([LOCK] if had_lock else [])])
        (mine / LOCK).touch()  # the next pass: a folder with a lock file of its own
    RunClaim(RunDir(tmp_path / "other"), is_main=False).take()
    assert not (tmp_path / "other").exists()
