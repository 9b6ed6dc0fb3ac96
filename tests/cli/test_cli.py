"""The command line: evaluate/translate output, and one-line errors for bad input."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data

from graphformer.cli import main
from graphformer.training import checkpoint
from graphformer.training.run_dir import BEST, LAST


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny copy model trained for one epoch (accuracy does not matter here)."""
    root = tmp_path_factory.mktemp("cli")
    data = small_copy_data(root / "data")
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
                "1",
                "--batch-size",
                "16",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    return run


def one_line_error(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("graphformer"), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def vocabulary(run):
    return set(json.loads((run / "vocab.json").read_text())["tgt"])


def test_evaluate_json(trained, capsys):
    assert main(["evaluate", str(trained), "--split", "test", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 40
    assert 0.0 <= scores["token_accuracy"] <= 1.0 and 0.0 <= scores["exact_match"] <= 1.0
    assert (scores["beam"], scores["alpha"], scores["split"]) == (5, 0.6, "test")  # the documented defaults


def test_evaluate_exact_match_is_what_translate_outputs(trained, capsys):
    data = trained.parent / "data"
    assert main(["evaluate", str(trained), "--split", "valid", "--beam", "1", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert main(["translate", str(trained), "--input", str(data / "valid.src"), "--beam", "1"]) == 0
    decoded = capsys.readouterr().out.splitlines()
    references = (data / "valid.tgt").read_text().splitlines()
    assert len(decoded) == len(references) and set(" ".join(decoded).split()) <= vocabulary(trained)
    # The two commands batch sentences differently, which may flip a near-tie of this barely
    # trained model on another CPU: agree within two sentences of forty.
    assert abs(scores["exact_match"] - sum(d == r for d, r in zip(decoded, references)) / len(references)) <= 2 / 40
    pairs = [(d.split(), r.split()) for d, r in zip(decoded, references)]
    right = sum(a == b for d, r in pairs for a, b in zip(d, r))
    assert abs(scores["char_accuracy"] - right / sum(max(len(d), len(r)) for d, r in pairs)) <= 0.1
    assert main(["evaluate", str(trained), "--split", "valid", "--beam", "3"]) == 0
    assert "valid: n=40" in capsys.readouterr().out


def test_translate_keeps_empty_lines_aligned(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b c\n\nq r\n")
    assert main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--beam", "2"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) == 4 and out[1] == "" and out[3] == ""
    assert out[0] and out[2] and set((out[0] + " " + out[2]).split()) <= vocabulary(trained)


def test_translate_counts_lines_as_files_do(trained, tmp_path, capsys):
    """A form feed or U+2028 inside a line is not a line break (str.splitlines would make it one)."""
    (tmp_path / "in.txt").write_text("a b\x0cc\r\nq\u2028r\n")
    assert main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--beam", "1", "--quiet"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 3  # two lines and the final newline


def test_translate_and_evaluate_batch_as_decoding_batches(trained, tmp_path, capsys, monkeypatch):
    """translate and evaluate decode in `decoding_batches` (the decoding benchmark's batches too),
    with the default token budget unless --batch-tokens is given."""
    import graphformer.decoding
    from graphformer.data.batching import DECODE_BATCH_TOKENS, decoding_batches
    from graphformer.running.loaded import LoadedRun
    from graphformer.training.config import DecodeConfig

    assert DecodeConfig().batch_tokens == DECODE_BATCH_TOKENS
    lines = ["a " * n for n in (5, 1, 3, 7, 2, 6, 4)]  # distinct lengths name the lines
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    seen, make_batch = [], graphformer.decoding.make_batch

    def spy(pool, src, *args, **kwargs):
        seen.append([len(s) for s in src])
        return make_batch(pool, src, *args, **kwargs)

    monkeypatch.setattr(graphformer.decoding, "make_batch", spy)
    assert (
        main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--batch-tokens", "12", "--beam", "1"])
        == 0
    )
    lengths = [len(line.split()) for line in lines]
    expected = [[lengths[i] for i in batch] for batch in decoding_batches(lengths, 12)]
    assert seen == expected and len(expected) > 2
    assert len(capsys.readouterr().out.splitlines()) == len(lines)
    seen.clear()  # evaluate decodes the split in the same batches
    assert main(["evaluate", str(trained), "--batch-tokens", "12", "--beam", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch_tokens"] == 12
    lengths = [len(s) for s in LoadedRun(trained).split("test").src]
    expected = [[lengths[i] for i in batch] for batch in decoding_batches(lengths, 12)]
    assert seen == expected and len(expected) > 2


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_translate_and_evaluate_decode_in_the_precision_asked_for(trained, tmp_path, capsys, monkeypatch, precision):
    """--precision bfloat16 decodes under torch.autocast: keys and values are cached in bfloat16,
    and search still reads float32 log-probabilities; the loss evaluate reports stays near
    float32's. float32, the default, caches float32."""
    from graphformer.decoding import IncrementalStepper

    seen, step = set(), IncrementalStepper.step

    def spy(self, tokens):
        log_probs = step(self, tokens)
        seen.add((self.cache.dtype, log_probs.dtype))
        return log_probs

    monkeypatch.setattr(IncrementalStepper, "step", spy)
    (tmp_path / "in.txt").write_text("a b c\nq r\n")
    assert (
        main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--precision", precision, "--quiet"]) == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert seen == {(getattr(torch, precision), torch.float32)}
    scores = []
    for asked in ("float32", precision):
        seen.clear()
        assert main(["evaluate", str(trained), "--json", "--beam", "1", "--precision", asked]) == 0
        scores.append(json.loads(capsys.readouterr().out))
        assert seen == {(getattr(torch, asked), torch.float32)}
    assert scores[1]["precision"] == precision
    assert abs(scores[1]["loss"] - scores[0]["loss"]) < 0.05


@pytest.mark.parametrize("flags, warned", [([], True), (["avx512_bf16"], False), (None, False)])
def test_bfloat16_on_a_cpu_that_would_emulate_it_is_warned_of(trained, tmp_path, capsys, monkeypatch, flags, warned):
    """Without bfloat16 instructions PyTorch emulates bfloat16 products, many times slower than
    float32: translate says so (and decodes); where the CPU's flags cannot be read (None), nothing."""
    import graphformer.precision

    monkeypatch.setattr(graphformer.precision, "cpu_bfloat16_instructions", lambda: flags)
    (tmp_path / "in.txt").write_text("a b c\n")
    assert (
        main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--precision", "bfloat16", "--quiet"])
        == 0
    )
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1
    assert ("no bfloat16 instructions" in err) == warned, err


def test_the_cpus_bfloat16_instructions_are_read_from_its_flags(tmp_path):
    from graphformer.precision import cpu_bfloat16_instructions

    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    assert cpu_bfloat16_instructions(str(tmp_path / "cpuinfo")) == ["avx512_bf16"]
    (tmp_path / "cpuinfo").write_text("flags\t\t: fpu avx2\n")
    assert cpu_bfloat16_instructions(str(tmp_path / "cpuinfo")) == []
    assert cpu_bfloat16_instructions(str(tmp_path / "nothing")) is None
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nFeatures\t: fp asimd bf16 sve\n")  # ARM's: cannot tell
    assert cpu_bfloat16_instructions(str(tmp_path / "cpuinfo")) is None


def test_a_gpu_without_bfloat16_is_refused_before_decoding(monkeypatch):
    import torch

    from graphformer.errors import ConfigError
    from graphformer.precision import autocast

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    with pytest.raises(ConfigError, match="no bfloat16 support; use float16"):
        autocast("bfloat16", "cuda")


def test_float16_on_the_cpu_is_refused_before_decoding(trained, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b c\n")
    code = main(["translate", str(trained), "--input", str(tmp_path / "in.txt"), "--precision", "float16"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--precision float16 needs a GPU" in err and "use bfloat16 on the CPU" in err, err


def test_translate_from_stdin_in_a_real_process(trained):
    proc = subprocess.run(
        [sys.executable, "-m", "graphformer", "translate", str(trained)],
        input=b"a b\nc d e\n",
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 2 and all(lines) and set(" ".join(lines).split()) <= vocabulary(trained)


def test_translate_rejects_non_utf8(trained, tmp_path, capsys):
    (tmp_path / "bad.txt").write_bytes(b"a b\n\xff\n")
    one_line_error(capsys, ["translate", str(trained), "--input", str(tmp_path / "bad.txt")], "line 2", "UTF-8")


def test_translate_of_an_empty_input_says_so(trained, tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert main(["translate", str(trained), "--input", str(tmp_path / "empty.txt")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "empty.txt is empty; nothing to translate" in captured.err
    assert "translated" not in captured.err  # no throughput of nothing


def test_translate_reads_past_a_byte_order_mark(trained, tmp_path, capsys):
    """A file saved with a UTF-8 byte-order mark (Windows editors write one, with CRLF line ends)
    translates as the same lines without it: the mark is no part of the first word."""
    outputs = []
    for name, raw in (("plain.txt", b"a b\nc d e\n"), ("bom.txt", b"\xef\xbb\xbfa b\r\nc d e\r\n")):
        (tmp_path / name).write_bytes(raw)
        assert main(["translate", str(trained), "--input", str(tmp_path / name), "--beam", "1"]) == 0
        captured = capsys.readouterr()
        assert "<unk>" not in captured.err
        outputs.append(captured.out)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 2


def test_translate_reports_truncation_of_long_lines(trained, tmp_path, capsys):
    (tmp_path / "long.txt").write_text(" ".join(["a"] * 300) + "\n")
    assert main(["translate", str(trained), "--input", str(tmp_path / "long.txt")]) == 0
    assert "line 1 has 300 tokens" in capsys.readouterr().err


def test_help_of_every_subcommand():
    for cmd in ("train", "evaluate", "translate", "animate", "heatmap", "attend"):
        proc = subprocess.run([sys.executable, "-m", "graphformer", cmd, "--help"], capture_output=True, text=True)
        assert proc.returncode == 0 and "usage: graphformer " + cmd in proc.stdout
        text = " ".join(proc.stdout.split())  # argparse wraps lines
        assert "(default: None)" not in text
        for option in re.findall(r"\n  (--[a-z-]+)", proc.stdout):  # each option's default shown once at most
            entry = text.split(option, 2)[-1].split(" --", 1)[0]
            assert entry.count("default") <= 1, (cmd, option, entry)
        if cmd in ("evaluate", "translate", "attend"):
            assert "beam size (1 = greedy) (default: 5)" in text and "(default: 0.6)" in text
        if cmd == "heatmap":  # options outside the configs show their defaults too
            assert "one panel per head (default: 0)" in text and "(default: last)" in text
    assert "--lr-factor X Noam factor" in " ".join(
        subprocess.run(
            [sys.executable, "-m", "graphformer", "train", "--help"], capture_output=True, text=True
        ).stdout.split()
    )


def test_the_command_line_answers_help_without_loading_torch():
    """--help and argument errors must be instant: torch and DGL load only when a command runs."""
    probe = (
        "import sys, graphformer.cli as cli\n"
        "try:\n    cli.main(['train', '--epochs', 'x'])\nexcept SystemExit as e:\n    assert e.code == 2\n"
        "assert 'torch' not in sys.modules and 'dgl' not in sys.modules, sorted(sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "invalid int value: 'x'" in proc.stderr


def test_abbreviated_options_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--out", str(tmp_path / "run"), "--epoch", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "unrecognized arguments: --epoch 2" in err
    assert err.strip().endswith("see graphformer train --help")  # the command's own options
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "files,needles",
    [
        ({"train.src": b"a\nb\n", "train.tgt": b"a\n"}, ["has 2 lines but", "train.tgt has 1"]),
        ({"train.src": b"", "train.tgt": b""}, ["is empty"]),
        ({"train.src": b"a\n\xc3\x28\n", "train.tgt": b"a\nb\n"}, ["line 2 is not valid UTF-8"]),
    ],
)
def test_bad_training_files(tmp_path, capsys, files, needles):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    one_line_error(
        capsys,
        ["train", "--task", "parallel", "--data-dir", str(tmp_path), "--out", str(tmp_path / "run"), *TINY_MODEL],
        *needles,
    )


def test_unknown_task_and_option_values(tmp_path, capsys):
    for option, value in (("--task", "palindrome"), ("--positions", "rotary")):
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "--out", str(tmp_path), option, value])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"invalid choice: '{value}'" in err
    one_line_error(capsys, ["train", "--out", str(tmp_path), "--epochs", "0"], "--epochs must be at least 1")


def test_missing_and_truncated_checkpoints(trained, tmp_path, capsys):
    one_line_error(capsys, ["evaluate", str(tmp_path / "nowhere")], "does not exist")
    (tmp_path / "empty").mkdir()
    one_line_error(capsys, ["evaluate", str(tmp_path / "empty")], "is not a run directory (it has no config.json)")
    (tmp_path / "data").mkdir()  # a data folder given in place of the run's
    (tmp_path / "data" / "train.src").write_text("a b\n")
    one_line_error(capsys, ["evaluate", str(tmp_path / "data")], "is not a run directory")
    started = tmp_path / "started"  # a run whose training never reached its first checkpoint
    started.mkdir()
    shutil.copy(trained / "config.json", started)
    one_line_error(capsys, ["evaluate", str(started)], "no checkpoint in")
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for name in (BEST, LAST):
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])
    one_line_error(capsys, ["evaluate", str(run)], "damaged or truncated")
    (tmp_path / "notes.pt").write_text("not a checkpoint\n")
    err = one_line_error(
        capsys,
        ["evaluate", str(run), "--checkpoint", str(tmp_path / "notes.pt")],
        "notes.pt is not a checkpoint, or a damaged one; ",
    )
    assert "weights_only" not in err and "operand" not in err  # torch's unpickler internals are not passed on
    (tmp_path / "junk.pt").write_text("junk\n")  # read as a legacy pickle: a KeyError inside torch
    one_line_error(capsys, ["evaluate", str(run), "--checkpoint", str(tmp_path / "junk.pt")], "junk.pt is")
    one_line_error(
        capsys,
        ["evaluate", str(run), "--checkpoint", str(tmp_path / "empty")],
        "is a folder; give best, last, averaged or a checkpoint file",
    )


def test_evaluate_on_the_training_split_scores_the_pairs_the_run_trained_on(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=48)
    run = tmp_path / "run"
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
                "1",
                "--batch-size",
                "16",
                "--train-limit",
                "20",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "train", "--beam", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 20


def test_a_run_that_max_steps_ends_says_it_stopped_and_how_to_go_on(tmp_path, capsys):
    from helpers import small_copy_data

    data = small_copy_data(tmp_path / "data", n_train=48)  # 3 steps per epoch
    run = tmp_path / "run"
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
                "3",
                "--batch-size",
                "16",
                "--max-steps",
                "4",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.startswith("stopped at step 4, 1 of 3 epochs complete (valid loss ") and "--max-steps 8" in out, out
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "100"]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .splitlines()[-1]
        .startswith("done (step 9, 3 of 3 epochs complete): valid loss ")
    )


def test_a_run_directory_the_system_refuses_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("a file\n")
    one_line_error(
        capsys,
        ["train", "--task", "copy", "--out", str(tmp_path / "notes.txt" / "run")],
        "notes.txt/run: Not a directory; check the path and its permissions",
    )


def test_resume_without_checkpoint(tmp_path, capsys):
    one_line_error(capsys, ["train", "--out", str(tmp_path), "--resume"], "--resume: no run to continue")


def test_checkpoint_from_another_run(trained, tmp_path, capsys):
    other_data = tmp_path / "other"
    other_data.mkdir()
    (other_data / "train.src").write_text("x y z\n" * 20)
    (other_data / "train.tgt").write_text("x y z\n" * 20)
    (other_data / "valid.src").write_text("x\n")
    (other_data / "valid.tgt").write_text("x\n")
    other = tmp_path / "other_run"
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
                *TINY_MODEL,
            ]
        )
        == 0
    )
    mixed = tmp_path / "mixed"
    shutil.copytree(trained, mixed)
    for name in (BEST, LAST):
        shutil.copy(other / name, mixed / name)
    one_line_error(capsys, ["evaluate", str(mixed)], "another vocabulary")

    bigger = tmp_path / "bigger"  # same vocabulary, another model
    shutil.copytree(trained, bigger)
    config = json.loads((bigger / "config.json").read_text())
    config["model"]["d_ff"] = 128
    (bigger / "config.json").write_text(json.dumps(config))
    one_line_error(capsys, ["evaluate", str(bigger)], "another model")


def test_existing_run_is_never_overwritten(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    one_line_error(
        capsys,
        ["train", "--task", "parallel", "--data-dir", str(run / ".." / "nothing"), "--out", str(run), *TINY_MODEL],
        "already holds a run",
        "--resume",
    )
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert before == after


def test_ctrl_c_writes_a_checkpoint_and_exits_cleanly(tmp_path):
    data = small_copy_data(tmp_path / "data", n_train=2000)
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphformer",
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(run),
            "--epochs",
            "50",
            "--batch-size",
            "8",
            *TINY_MODEL,
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not ((run / "steps.jsonl").exists() and len(read_jsonl(run / "steps.jsonl")) >= 3):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    python_m = shlex.join([sys.executable, "-m", "graphformer"])  # the command as this test started it
    assert f"continue with: {python_m} train --out {run} --resume".encode() in err, err
    state = checkpoint.load(run / LAST)
    assert state["progress"]["step"] == read_jsonl(run / "steps.jsonl")[-1]["step"] >= 3
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]
    assert (
        main(["train", "--out", str(run), "--resume", "--max-steps", str(state["progress"]["step"] + 2), "--quiet"])
        == 0
    )
    assert read_jsonl(run / "steps.jsonl")[-1]["step"] == state["progress"]["step"] + 2


# A training run stopped by a first Ctrl-C in step 6 (the checkpoint of epoch 1, 4 steps, is on disk),
# and a second one while the interrupt's checkpoint is written ("save") or in an exit hook ("exit").
SECOND_CTRL_C = r"""
import atexit, signal, sys
import torch
from graphformer.cli import main
from graphformer.training.trainer import Trainer

where, argv = sys.argv[1], sys.argv[2:]
step, save = Trainer.train_step, torch.save

def first_ctrl_c_in_step_6(self, *args):
    if self.progress.step == 5:
        signal.raise_signal(signal.SIGINT)
    return step(self, *args)

class SecondCtrlCMidWrite:
    def __init__(self, f):
        self.f, self.writes = f, 0

    def write(self, data):
        self.writes += 1
        if self.writes == 3:  # of many: torch's zip writer is in the middle of the file
            signal.raise_signal(signal.SIGINT)
        return self.f.write(data)

    def __getattr__(self, name):  # flush, and whatever else the writer asks of its file
        return getattr(self.f, name)

def save_with_a_second_ctrl_c(obj, f, *args, **kwargs):
    if where == "save" and isinstance(obj, dict) and obj["progress"]["step"] == 6:
        f = SecondCtrlCMidWrite(f)  # inside torch's zip writer
    return save(obj, f, *args, **kwargs)

Trainer.train_step, torch.save = first_ctrl_c_in_step_6, save_with_a_second_ctrl_c
if where == "exit":
    atexit.register(signal.raise_signal, signal.SIGINT)  # runs after graphformer's hooks, as torch's do
sys.exit(main(argv))
"""


@pytest.mark.parametrize("where", ["save", "exit"])
def test_a_second_ctrl_c_ends_training_with_one_line_and_status_130(tmp_path, where):
    data = small_copy_data(tmp_path / "data", n_train=64)
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SECOND_CTRL_C,
            where,
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(run),
            "--epochs",
            "3",
            "--batch-size",
            "16",
            *TINY_MODEL,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 130 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, (
        proc.stderr[-3000:]
    )
    assert "interrupted" in lines[-1] and len(lines) == {"save": 1, "exit": 2}[where], proc.stderr
    written = {"save": 4, "exit": 6}[where]  # the interrupt's checkpoint is whole or absent
    assert checkpoint.load(run / LAST)["progress"]["step"] == written
    cut_off = [p for p in run.iterdir() if ".tmp-" in p.name]  # the interrupt's, left by the exit
    assert len(cut_off) == {"save": 1, "exit": 0}[where], cut_off
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "7"]) == 0  # and harmless
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]
    assert checkpoint.load(run / LAST)["progress"]["step"] == 7


def test_a_run_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path, monkeypatch, capsys):
    """A shell starts a script's background job (cmd &) with SIGINT ignored, so that a Ctrl-C at the
    terminal spares it: training keeps it ignored (as a run of several processes does), and a
    SIGTERM still stops it with a checkpoint."""
    from graphformer.training.trainer import Trainer

    data = small_copy_data(tmp_path / "data", n_train=64)
    step = Trainer.train_step
    for sig, code in ((signal.SIGINT, 0), (signal.SIGTERM, 130)):

        def interrupted_step(self, *args, sig=sig):
            signal.raise_signal(sig)  # arrives during the first steps
            return step(self, *args)

        monkeypatch.setattr(Trainer, "train_step", interrupted_step)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            assert (
                main(
                    [
                        "train",
                        "--task",
                        "parallel",
                        "--data-dir",
                        str(data),
                        "--out",
                        str(tmp_path / sig.name),
                        "--epochs",
                        "2",
                        "--batch-size",
                        "16",
                        "--quiet",
                        *TINY_MODEL,
                    ]
                )
                == code
            )
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        finally:
            signal.signal(signal.SIGINT, previous)
    assert len(read_jsonl(tmp_path / "SIGINT" / "metrics.jsonl")) == 2  # trained to the end
    assert "interrupted at step 1" in capsys.readouterr().err


# How the user started graphformer, and the command its hints then print (graphformer.invocation).
def started_as(how, tmp_path, monkeypatch) -> str:
    """Make this process look started ``how``; the command its hints should print."""
    import graphformer

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRAPHFORMER_COMMAND", raising=False)
    if how == "script by its path":
        monkeypatch.setattr(sys, "argv", [".venv/bin/graphformer"])
        return ".venv/bin/graphformer"
    if how == "script by a path with a space":
        monkeypatch.setattr(sys, "argv", ["my venv/bin/graphformer"])
        return "'my venv/bin/graphformer'"
    if how == "script found on PATH":  # the shell passes the full path, which the user did not type
        script = tmp_path / "bin" / "graphformer"
        script.parent.mkdir()
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
        monkeypatch.setenv("PATH", str(script.parent))
        monkeypatch.setattr(sys, "argv", [str(script)])
        return "graphformer"
    main_py = str(Path(graphformer.__file__).parent / "__main__.py")
    if how == "module":
        monkeypatch.setattr(sys, "argv", [main_py, "train"])
        monkeypatch.setattr(sys, "orig_argv", ["python3", "-X", "utf8", "-m", "graphformer", "train"])
        return "python3 -X utf8 -m graphformer"
    if how == "a process of train --processes":  # started as a module, told its launcher's command
        monkeypatch.setattr(sys, "argv", [main_py])
        monkeypatch.setenv("GRAPHFORMER_COMMAND", ".venv/bin/graphformer")
        return ".venv/bin/graphformer"
    assert how == "another program calling main"
    monkeypatch.setattr(sys, "argv", ["/usr/bin/pytest"])
    return "graphformer"


STARTS = [
    "script by its path",
    "script by a path with a space",
    "script found on PATH",
    "module",
    "a process of train --processes",
    "another program calling main",
]


@pytest.mark.parametrize("how", STARTS)
def test_the_help_an_error_points_to_is_the_command_as_started(tmp_path, monkeypatch, capsys, how):
    command = started_as(how, tmp_path, monkeypatch)
    (tmp_path / "run.yaml").write_text("model:\n  layer: 1\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--out", "run", "--epoch", "2"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.startswith("graphformer train: error: "), err
    assert err.endswith(f"; see {command} train --help"), err
    one_line_error(capsys, ["train", "--out", "run", "--config", "run.yaml"], f"; see {command} train --help")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("how", ["script by its path", "script found on PATH", "module"])
def test_the_hint_after_ctrl_c_is_the_command_as_started(tmp_path, monkeypatch, capsys, how):
    from graphformer.training.trainer import Trainer

    data = small_copy_data(tmp_path / "data", n_train=64)
    command = started_as(how, tmp_path, monkeypatch)
    step = Trainer.train_step

    def interrupted_step(self, *args):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C during the first step
        return step(self, *args)

    monkeypatch.setattr(Trainer, "train_step", interrupted_step)
    argv = ["--task", "parallel", "--data-dir", str(data), "--batch-size", "16", *TINY_MODEL]
    assert main(["train", *argv, "--out", "run"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"continue with: {command} train --out run --resume"), err


def test_progress_in_a_log_file_is_plain_lines(tmp_path):
    """stderr that is not a terminal gets whole lines (no carriage returns) and rounded metrics."""
    data = small_copy_data(tmp_path / "data", n_train=64)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphformer",
            "train",
            "--task",
            "parallel",
            "--data-dir",
            str(data),
            "--out",
            str(tmp_path / "run"),
            "--epochs",
            "2",
            "--batch-size",
            "16",
            *[a for a in TINY_MODEL if a != "--quiet"],
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr
    assert re.search(r"^epoch 2/2 step 4/4: loss \d+\.\d{3}, \d+ tokens/s, lr \d\.\d\de-\d\d$", proc.stderr, re.M), (
        proc.stderr
    )
    line = re.search(r"^epoch 1 \(step 4\): valid .*$", proc.stderr + proc.stdout, re.M)
    assert line, proc.stderr
    numbers = re.findall(r"\d+\.\d+", line.group(0))
    assert numbers and all(len(n.replace(".", "").lstrip("0")) <= 4 for n in numbers), line.group(0)  # rounded


def test_help_names_every_attention_pattern_and_task():
    """The command line writes these lists into its help (--help stays fast without torch): the
    pattern names must be exactly the library's, and the task's help must name every task."""
    from graphformer.cli import command_parser, option_help
    from graphformer.data.tasks import TASKS
    from graphformer.graphs.patterns import NAMES

    names = command_parser("train").description.split("Names:")[1].split("(")[0]  # "full, causal, window:W, ..."
    assert sorted(re.findall(r"\b[a-z]{3,}\b", names)) == sorted(NAMES)
    task_help = option_help("train", "--task")
    assert set(TASKS) <= set(re.findall(r"\b[a-z0-9]+\b", task_help))  # each task told apart in words


@pytest.mark.parametrize("recipe", ["cpu.yaml", "gpu.yaml"])
def test_the_multi30k_recipe_files_are_valid_configurations(recipe):
    """What cpu.sh and gpu.sh train: every option known and in range (a typo fails here, not two
    hours into a run), for the Multi30k task."""
    from pathlib import Path

    from graphformer.cli import read_config_file
    from graphformer.model.config import ModelConfig
    from graphformer.training.config import TrainConfig

    model, train = read_config_file(str(Path(__file__).resolve().parents[2] / "examples" / "multi30k" / recipe))
    ModelConfig(src_vocab=1, tgt_vocab=1, **model)
    assert TrainConfig(**train).task == "multi30k"


def test_a_run_without_its_best_checkpoint_yet_is_decoded_from_its_last_and_says_so(tmp_path, capsys):
    """Stopped before its first epoch ended, a run has only checkpoint_last.pt: evaluate (best by
    default) decodes that one and warns; asked for last, it says nothing."""
    data = small_copy_data(tmp_path / "data", n_train=48)  # 3 steps per epoch
    run = tmp_path / "run"
    assert (
        main(
            ["train", "--data-dir", str(data), "--out", str(run), "--batch-size", "16", "--max-steps", "2", *TINY_MODEL]
        )
        == 0
    )
    assert not (run / "checkpoint_best.pt").exists()
    for which, warned in (("best", True), ("last", False)):
        capsys.readouterr()
        assert main(["evaluate", str(run), "--beam", "1", "--json", "--checkpoint", which]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["checkpoint"] == str(run / "checkpoint_last.pt")
        assert ("has no checkpoint_best.pt" in err and "using checkpoint_last.pt" in err) == warned, err
