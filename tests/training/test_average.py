"""Kept epoch checkpoints, their average, early stopping, and translating a file in batches."""

import json
import shutil

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data

from graphformer.cli import main
from graphformer.training import checkpoint
from graphformer.training.run_dir import LAST


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("average")
    data = small_copy_data(root / "data", n_train=96)
    run = root / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "parallel",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--epochs",
                "4",
                "--batch-size",
                "16",
                "--keep-last",
                "2",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    return run


def test_keep_last_keeps_only_the_newest_epochs(run):
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["epoch_0003.pt", "epoch_0004.pt"]
    assert checkpoint.load(run / "checkpoints" / "epoch_0004.pt")["progress"]["epoch"] == 4


def test_average_is_the_mean_of_the_kept_weights(run, tmp_path, capsys):
    work = tmp_path / "run"
    shutil.copytree(run, work)
    assert main(["average", str(work), "--last", "2"]) == 0
    assert "epoch_0003, epoch_0004" in capsys.readouterr().out
    averaged = checkpoint.load(work / "checkpoint_averaged.pt")
    a, b = (checkpoint.load(work / "checkpoints" / f"epoch_000{e}.pt")["model"] for e in (3, 4))
    for name, value in averaged["model"].items():
        torch.testing.assert_close(value, (a[name] + b[name]) / 2, rtol=0, atol=1e-6)
    assert main(["evaluate", str(work), "--checkpoint", "averaged", "--beam", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["checkpoint"].endswith("checkpoint_averaged.pt")
    (tmp_path / "in.txt").write_text("a b c\n")
    assert (
        main(
            [
                "translate",
                str(work),
                "--checkpoint",
                str(work / "checkpoint_averaged.pt"),
                "--input",
                str(tmp_path / "in.txt"),
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1

    assert main(["average", str(work), "--best", "1", "-o", str(tmp_path / "best.pt")]) == 0
    best_epoch = min(read_jsonl(work / "metrics.jsonl")[2:], key=lambda m: m["valid_loss"])["epoch"]
    assert checkpoint.load(tmp_path / "best.pt")["averaged_from"] == [f"epoch_{best_epoch:04d}.pt"]


def test_best_breaks_ties_on_the_metric_by_validation_loss(run, tmp_path):
    from graphformer.training.average import choose
    from graphformer.training.run_dir import RunDir

    work = tmp_path / "run"
    shutil.copytree(run, work)
    records = [
        {"epoch": e, "step": 6 * e, "valid_loss": loss, "valid_exact_match": match}
        for e, loss, match in ((1, 3.0, 0.0), (2, 2.0, 0.5), (3, 1.5, 0.5), (4, 1.0, 0.5))
    ]
    (work / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    kept = RunDir(work)  # epochs 3 and 4, tied on exact match: the lower loss ranks first
    assert [p.name for p in choose(kept, best=1, select_by="exact_match", larger_is_better=True)] == ["epoch_0004.pt"]
    records[2]["valid_exact_match"] = 0.6  # a better metric outranks any loss
    (work / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [p.name for p in choose(kept, best=1, select_by="exact_match", larger_is_better=True)] == ["epoch_0003.pt"]
    assert [p.name for p in choose(kept, best=1, select_by="loss")] == ["epoch_0004.pt"]


def test_epochs_past_9999_are_kept_and_chosen_by_number_not_by_name(tmp_path):
    """epoch_10000.pt sorts before epoch_9999.pt by name: keeping, averaging and recorded maps go
    by the epoch's number."""
    from graphformer.files import epoch_files
    from graphformer.training.average import choose
    from graphformer.training.run_dir import RunDir

    run = RunDir(tmp_path / "run")
    run.create()
    for epoch in (9998, 9999, 10000, 10001):
        run.keep_epoch_checkpoint({"epoch": epoch}, epoch, keep_last=2)
    assert [p.name for p in run.epoch_checkpoints()] == ["epoch_10000.pt", "epoch_10001.pt"]
    assert [p.name for p in choose(run, last=1)] == ["epoch_10001.pt"]
    records = [{"epoch": e, "valid_loss": loss} for e, loss in ((10000, 1.0), (10001, 2.0))]
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [p.name for p in choose(run, best=2)] == ["epoch_10000.pt", "epoch_10001.pt"]  # oldest first
    for name in ("epoch_0010.pt", "epoch_0009.pt", "epoch_0100.pt", "epoch_0003 copy.pt", "epoch_best.pt"):
        (tmp_path / name).touch()
    assert [p.name for p in epoch_files(tmp_path)] == ["epoch_0009.pt", "epoch_0010.pt", "epoch_0100.pt"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--last", "3"], "keeps 2 epoch checkpoints, fewer than the 3 asked for"),
        (["--best", "0"], "--best must be at least 1"),
        (["--last", "0"], "--last must be at least 1"),
        (["--last", "2", "-o", "{run}/checkpoint_best.pt"], "is one of the run's own files"),
        (["--last", "2", "-o", "{run}/checkpoints/epoch_0003.pt"], "is one of the run's own files"),
        (["--last", "2", "-o", "{run}/config.json"], "is one of the run's own files"),
        (
            ["--last", "2", "-o", "{run}/checkpoints/epoch_0009.pt"],
            "in a folder the run keeps",
        ),  # a later --last would take it
        (["--last", "2", "-o", "{run}/checkpoints"], "is a folder; give the name of the file to write"),
    ],
)
def test_average_refuses_what_it_cannot_do(run, tmp_path, capsys, argv, needle):
    work = tmp_path / "run"
    shutil.copytree(run, work)
    before = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    assert main(["average", str(work), *[a.format(run=work) for a in argv]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not (work / "checkpoint_averaged.pt").exists()
    assert {p: p.read_bytes() for p in work.rglob("*") if p.is_file()} == before


def test_average_replaces_an_earlier_average_but_no_other_file(run, tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main(["average", str(run), "--last", "2", "-o", str(notes)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "notes.txt exists and is not an average" in err, err
    assert notes.read_text() == "my notes\n"
    resumable = tmp_path / "last.pt"  # another run's checkpoint, optimizer state and all: not replaced either
    shutil.copy(run / LAST, resumable)
    assert main(["average", str(run), "--last", "2", "-o", str(resumable)]) == 2
    assert "last.pt exists and is not an average" in capsys.readouterr().err
    assert resumable.read_bytes() == (run / LAST).read_bytes()
    capsys.readouterr()
    for last in ("2", "1"):  # the second average replaces the first, and says so
        assert main(["average", str(run), "--last", last, "-o", str(tmp_path / "avg.pt")]) == 0
        assert ("replacing the earlier average" in capsys.readouterr().out) == (last == "1")
    assert len(checkpoint.load(tmp_path / "avg.pt")["averaged_from"]) == 1
    for command in (["average", str(run / "config.json"), "--last", "1"], ["evaluate", str(run / "config.json")]):
        assert main(command) == 2
        assert "config.json is a file, not a run directory" in capsys.readouterr().err


def test_average_refuses_checkpoints_of_another_model(run, tmp_path, capsys):
    other_data = small_copy_data(tmp_path / "data", n_train=32)
    other = tmp_path / "other"
    assert (
        main(
            [
                "train",
                "--task",
                "parallel",
                "--data-dir",
                str(other_data),
                "--out",
                str(other),
                "--epochs",
                "1",
                "--batch-size",
                "16",
                "--keep-last",
                "1",
                *TINY_MODEL,
                "--d-ff",
                "48",
            ]
        )
        == 0
    )
    work = tmp_path / "run"
    shutil.copytree(run, work)
    shutil.copy(other / "checkpoints" / "epoch_0001.pt", work / "checkpoints" / "epoch_0001.pt")
    assert main(["average", str(work), "--last", "3"]) == 2
    err = capsys.readouterr().err
    assert "only checkpoints of one run can be averaged" in err and "epoch_0001.pt" in err
    assert not (work / "checkpoint_averaged.pt").exists()


def test_patience_stops_training_early(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=48)
    run = tmp_path / "run"
    # exact match stays 0 for a tiny model in its first epochs: no improvement after the first
    assert (
        main(
            [
                "train",
                "--task",
                "parallel",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--epochs",
                "20",
                "--batch-size",
                "16",
                "--select-by",
                "exact_match",
                "--patience",
                "1",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["valid_exact_match"] for m in metrics] == [0.0, 0.0]
    assert len(metrics) == 2
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert last_line.startswith(
        "stopped early (step 6, 2 of 20 epochs complete: no better valid exact_match in the last 1 epoch): valid loss "
    ), last_line
    # Resumed as it was, it stays stopped (it trains no epoch more) and says how to go on.
    capsys.readouterr()
    last = (run / "checkpoint_last.pt").read_bytes()
    assert main(["train", "--out", str(run), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "it stopped early" in out and "--patience 2" in out, out
    assert len(read_jsonl(run / "metrics.jsonl")) == 2 and (run / "checkpoint_last.pt").read_bytes() == last
    assert main(["train", "--out", str(run), "--resume", "--patience", "2", "--epochs", "3"]) == 0
    assert len(read_jsonl(run / "metrics.jsonl")) == 3


def test_translate_writes_its_output_chunk_by_chunk_and_an_interrupt_keeps_a_prefix(run, tmp_path, capsys, monkeypatch):
    import graphformer.decoding
    from graphformer.data.batching import decoding_chunks
    from graphformer.decoding import Hypothesis

    calls, interrupt_at = [], [None]

    def copy_back_until_interrupted(model, src, beam, alpha, batch_tokens, pool, progress, edges):  # one call a chunk
        calls.append(len(src))
        if len(calls) == interrupt_at[0]:
            raise KeyboardInterrupt
        return [Hypothesis(tokens=list(s), log_prob=0.0, score=0.0) for s in src]

    monkeypatch.setattr(graphformer.decoding, "translate_ids", copy_back_until_interrupted)
    lines = [" ".join("abcdefghij"[(i + j) % 10] for j in range(1 + i % 4)) for i in range(200)]
    lines[7] = ""
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    # Batches of at most 10 source tokens (with each line's </s>), chunks of CHUNK_BATCHES times that:
    # one decoding call a chunk.
    translate = ["translate", str(run), "--input", str(tmp_path / "in.txt"), "--beam", "1", "--batch-tokens", "10"]
    assert main(translate) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == lines  # chunk after chunk, in order
    chunks = decoding_chunks([len(line.split()) for line in lines], 10)  # of CHUNK_BATCHES batches' tokens each
    assert calls == [sum(1 for i in chunk if lines[i]) for chunk in chunks] and len(calls) > 3
    calls.clear()
    interrupt_at[0] = 3  # in the third chunk
    assert main(translate) == 130
    captured = capsys.readouterr()
    written = captured.out.split("\n")[:-1]
    assert 0 < len(written) < len(lines) and written == lines[: len(written)]  # a prefix, every line complete
    assert f"the first {len(written)} of 200 lines are written" in captured.err.strip().splitlines()[-1]


def test_a_ctrl_c_while_translate_writes_lets_the_chunk_finish(run, tmp_path, capsys, monkeypatch):
    import signal
    import sys

    import graphformer.decoding
    from graphformer.decoding import Hypothesis

    monkeypatch.setattr(
        graphformer.decoding,
        "translate_ids",
        lambda model, src, **kw: [Hypothesis(tokens=list(s), log_prob=0.0, score=0.0) for s in src],
    )
    lines = [" ".join("abcdefghij"[(i + j) % 10] for j in range(1 + i % 3)) for i in range(300)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    write = sys.stdout.write

    def write_interrupted_midway(text):  # Ctrl-C arrives while the first chunk is being written
        half = len(text) // 2
        write(text[:half])
        signal.raise_signal(signal.SIGINT)
        return write(text[half:])

    monkeypatch.setattr(sys.stdout, "write", write_interrupted_midway)
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt"), "--batch-tokens", "10"]) == 130
    captured = capsys.readouterr()
    written = captured.out.split("\n")[:-1]
    assert 0 < len(written) < len(lines) and written == lines[: len(written)] and captured.out.endswith("\n")
    assert f"the first {len(written)} of 300 lines are written" in captured.err


class DGLError(Exception):
    """Named as DGL's own (dgl._ffi.base.DGLError derives from Exception, not RuntimeError)."""


@pytest.mark.parametrize(
    "failure",
    [  # what torch and DGL raise when an allocation fails
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 999000000000 bytes. Error code 12 (Cannot allocate memory)"
        ),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        DGLError("[12:00:00] /opt/dgl/src/runtime/cpu_device_api.cc:39: Check failed: std::bad_alloc"),
        MemoryError(),
    ],
)
def test_running_out_of_memory_is_a_one_line_error(run, tmp_path, capsys, monkeypatch, failure):
    import graphformer.decoding

    def too_big(*args, **kwargs):
        raise failure

    monkeypatch.setattr(graphformer.decoding, "translate_ids", too_big)
    (tmp_path / "in.txt").write_text("a b c\n")
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt"), "--beam", "1000000"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(  # after the progress bar
            "graphformer: error: out of memory; ask for less at once (a smaller --beam"
        )
    )


def test_translate_reports_throughput_and_keeps_the_order(run, tmp_path, capsys, monkeypatch):
    import graphformer.decoding
    from graphformer.decoding import Hypothesis

    calls = []

    def copy_back(model, src, beam, alpha, batch_tokens, pool, progress, edges):  # a decoder that echoes its input
        calls.append(([len(s) for s in src], batch_tokens))
        progress(len(src))
        return [Hypothesis(tokens=list(s), log_prob=0.0, score=0.0) for s in src]

    monkeypatch.setattr(graphformer.decoding, "translate_ids", copy_back)
    lines = ["a b c d e f", "q", "", "m n o p", "x y"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt"), "--beam", "1", "--batch-tokens", "5"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split("\n")[:-1] == lines  # every line back in its place, the empty one too
    assert "translated 4 sentences (13 tokens)" in captured.err and "sentences/s" in captured.err
    assert calls == [([6, 1, 4, 2], 5)]  # the nonempty lines, in order, to be batched by at most 5 source tokens
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt"), "--beam", "1", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split("\n")[:-1] == lines and captured.err == ""  # --quiet: no bar, no report


def test_best_reads_metrics_with_a_last_line_torn_by_a_crash(run, tmp_path, capsys):
    work = tmp_path / "run"
    shutil.copytree(run, work)
    with open(work / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 5, "valid_lo')  # kill -9 mid-write
    assert main(["average", str(work), "--best", "1", "-o", str(tmp_path / "best.pt")]) == 0
    best_epoch = min(read_jsonl(run / "metrics.jsonl")[2:], key=lambda m: m["valid_loss"])["epoch"]
    assert checkpoint.load(tmp_path / "best.pt")["averaged_from"] == [f"epoch_{best_epoch:04d}.pt"]
    with open(work / "metrics.jsonl", "a") as f:
        f.write('\n{"epoch": 6}\n')  # now the torn line is not the last: damage, not a crash
    assert main(["average", str(work), "--best", "1", "-o", str(tmp_path / "again.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl: line 5 is not JSON" in err
    assert not (tmp_path / "again.pt").exists()


def test_other_errors_are_not_read_as_out_of_memory(run, tmp_path, monkeypatch):
    import graphformer.decoding

    def broken(*args, **kwargs):
        raise DGLError("Check failed: a bug")

    monkeypatch.setattr(graphformer.decoding, "translate_ids", broken)
    (tmp_path / "in.txt").write_text("a b c\n")
    with pytest.raises(DGLError, match="a bug"):
        main(["translate", str(run), "--input", str(tmp_path / "in.txt")])
