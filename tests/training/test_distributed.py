"""Two gloo processes on CPU train like one process on the same global batches."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data, small_recall_data

from graphformer.training import checkpoint
from graphformer.training.run_dir import LAST, RANKS


def small_listops_data(path):
    from graphformer.data import listops

    return listops.write_listops(path, seed=1, min_length=8, max_length=40, sizes={"train": 48, "valid": 8})


TASKS = {
    "transformer": (small_copy_data, ["--task", "parallel"]),
    "encoder": (small_recall_data, ["--task", "recall", "--model", "encoder"]),
    "universal": (
        small_copy_data,
        ["--task", "parallel", "--model", "universal", "--max-depth", "3", "--ponder-weight", "0.05"],
    ),
    "transformer with typed and biased edges": (
        small_copy_data,
        ["--task", "parallel", "--enc-edges", "bias=t5:8,16+shaw=relative:2", "--dec-edges", "alibi"]
        + ["--cross-edges", "bias=relative:2"],
    ),
    "encoder reading its parse tree's roles": (
        small_listops_data,
        [
            "--task",
            "listops",
            "--model",
            "encoder",
            "--enc-attention",
            "window:1+parse-tree",
            "--enc-edges",
            "bias=role",
        ],
    ),
    "universal-encoder on each sample's parse tree": (
        small_listops_data,
        ["--task", "listops", "--model", "universal-encoder", "--max-depth", "3", "--enc-attention", "parse-tree"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", TASKS)
def test_two_processes_match_single_process(tmp_path, model):
    write_data, task = TASKS[model]
    data = write_data(tmp_path / "data")
    common = [
        "train",
        *task,
        "--data-dir",
        str(data),
        "--batch-size",
        "8",
        "--dropout",
        "0",
        "--max-steps",
        "5",
        "--device",
        "cpu",
        *TINY_MODEL,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # --processes meets on the loopback itself
    ddp = _run(
        [sys.executable, "-m", "graphformer", *common, "--processes", "2", "--out", str(tmp_path / "ddp")],
        env,
        tmp_path / "ddp.log",
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert "Traceback" not in ddp.stderr and "--processes 2 --out" in ddp.stderr  # how to go on, as it was started
    # One process, two batches accumulated per step: the same global batch as the two ranks together.
    single = _run(
        [sys.executable, "-m", "graphformer", *common, "--accumulate", "2", "--out", str(tmp_path / "single")],
        env,
        tmp_path / "single.log",
    )
    assert single.returncode == 0, single.stderr[-3000:]

    digests = json.loads((tmp_path / "ddp" / RANKS).read_text())["parameter_sha256"]
    assert len(digests) == 2 and digests[0] == digests[1]
    ddp_steps = read_jsonl(tmp_path / "ddp" / "steps.jsonl")
    single_steps = read_jsonl(tmp_path / "single" / "steps.jsonl")
    assert len(ddp_steps) == len(single_steps) == 5
    for a, b in zip(ddp_steps, single_steps):
        assert a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    a = checkpoint.load(tmp_path / "ddp" / LAST)["model"]
    b = checkpoint.load(tmp_path / "single" / LAST)["model"]
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_two_process_run_resumes_on_one_process_accumulating_two_batches(tmp_path):
    """Stopped after 3 steps on 2 processes, resumed on 1 with --accumulate 2 (the same 2 batches
    per step): the run ends where one process accumulating 2 batches from the start ends."""
    data = small_copy_data(tmp_path / "data")
    common = [
        "train",
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--batch-size",
        "8",
        "--dropout",
        "0",
        "--device",
        "cpu",
        *TINY_MODEL,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    ddp = _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--local-addr",
            "127.0.0.1",
            "--nproc_per_node=2",
            "-m",
            "graphformer",
            *common,
            "--max-steps",
            "3",
            "--out",
            str(tmp_path / "run"),
        ],
        env,
        tmp_path / "ddp.log",
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    refused = _run(
        [sys.executable, "-m", "graphformer", "train", "--out", str(tmp_path / "run"), "--resume", "--max-steps", "6"],
        env,
        tmp_path / "refused.log",
    )
    assert refused.returncode != 0 and "train --out " in refused.stderr and "--resume --accumulate 2" in refused.stderr
    resumed = _run(
        [
            sys.executable,
            "-m",
            "graphformer",
            "train",
            "--out",
            str(tmp_path / "run"),
            "--resume",
            "--max-steps",
            "6",
            "--accumulate",
            "2",
        ],
        env,
        tmp_path / "resumed.log",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    single = _run(
        [
            sys.executable,
            "-m",
            "graphformer",
            *common,
            "--accumulate",
            "2",
            "--max-steps",
            "6",
            "--out",
            str(tmp_path / "single"),
        ],
        env,
        tmp_path / "single.log",
    )
    assert single.returncode == 0, single.stderr[-3000:]
    assert [s["tokens"] for s in read_jsonl(tmp_path / "run" / "steps.jsonl")] == [
        s["tokens"] for s in read_jsonl(tmp_path / "single" / "steps.jsonl")
    ]
    a = checkpoint.load(tmp_path / "run" / LAST)
    b = checkpoint.load(tmp_path / "single" / LAST)
    assert a["processes"] == 1 and a["train_config"]["accumulate"] == 2
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_signal_to_any_one_rank_stops_every_rank_with_a_checkpoint(tmp_path):
    """A SIGTERM that reaches rank 1 alone (preemption, a killed worker's sibling) stops both ranks
    at the same step, and rank 0 writes that step's checkpoint: nothing trained is lost."""
    data = small_copy_data(tmp_path / "data")
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nproc_per_node=2",
        "-m",
        "graphformer",
        "train",
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--batch-size",
        "8",
        "--epochs",
        "1000",
        "--device",
        "cpu",
        *TINY_MODEL,
        "--out",
        str(run),
    ]
    printed, code = _signal_after_steps(
        command, env, run, tmp_path / "ddp.log", lambda agent: os.kill(_worker(agent, local_rank=1), signal.SIGTERM)
    )
    steps = read_jsonl(run / "steps.jsonl")
    assert checkpoint.load(run / LAST)["progress"]["step"] == steps[-1]["step"], printed[-3000:]
    assert f"interrupted at step {steps[-1]['step']}; checkpoint written" in printed, printed[-3000:]
    invoked = f"{sys.executable} -m graphformer"  # torchrun's processes name this interpreter
    assert f"continue with: {invoked} train --processes 2 --out {run} --resume" in printed  # one machine
    # Rank 0 exits with 130 as an interrupted run does; torchrun reports that exit in its own words.
    assert code != 0 and "Connection reset" not in printed and "(exitcode: 130) local_rank: 0" in printed


def _processes_run(data, run) -> list[str]:
    return [
        sys.executable,
        "-m",
        "graphformer",
        "train",
        "--processes",
        "2",
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--batch-size",
        "8",
        "--epochs",
        "1000",
        "--device",
        "cpu",
        *TINY_MODEL,
        "--out",
        str(run),
    ]


@pytest.mark.slow
def test_ctrl_c_stops_a_processes_run_after_one_step_with_a_checkpoint_and_no_traceback(tmp_path):
    """`train --processes 2` keeps its processes in their own process group: the Ctrl-C a terminal
    sends the launcher reaches each of them once, through it. Both stop after the same step, rank
    0 writes its checkpoint, the run ends with status 130 and its own lines, and the command it
    prints continues it."""
    data = small_copy_data(tmp_path / "data")
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    printed, code = _signal_after_steps(
        _processes_run(data, run), env, run, tmp_path / "ddp.log", lambda launcher: os.kill(launcher, signal.SIGINT)
    )
    steps = read_jsonl(run / "steps.jsonl")
    assert code == 130 and "Traceback" not in printed, printed[-3000:]
    assert checkpoint.load(run / LAST)["progress"]["step"] == steps[-1]["step"]
    resume = f"{sys.executable} -m graphformer train --processes 2 --out {run} --resume"  # as it was started
    assert f"interrupted at step {steps[-1]['step']}; checkpoint written to {run}; continue with: {resume}" in printed
    more = str(steps[-1]["step"] + 2)
    done = _run([*resume.split(), "--max-steps", more], env, tmp_path / "resume.log")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert [s["step"] for s in read_jsonl(run / "steps.jsonl")][-3:] == [steps[-1]["step"] + i for i in range(3)]


@pytest.mark.slow
def test_a_killed_process_of_a_processes_run_stops_the_other_and_the_launcher_says_how_to_go_on(tmp_path):
    """A process killed from outside (the out-of-memory killer, kill -9) says nothing, and the other
    cannot go on without it: the launcher stops that one at once, and its one line names the process,
    the signal and the command that continues the run. No traceback from anyone. (Which of the two
    ends rank 0 first is a race; `test_the_launcher_stops_the_others_at_once...` pins the launcher's side.)"""
    data = small_copy_data(tmp_path / "data")
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    printed, code = _signal_after_steps(
        _processes_run(data, run),
        env,
        run,
        tmp_path / "ddp.log",
        lambda launcher: os.kill(_worker(launcher, local_rank=1), signal.SIGKILL),
    )
    assert code == 128 + signal.SIGKILL and "Traceback" not in printed, printed[-3000:]
    # Rank 0 is stopped at once, or ends by itself first on the lost connection, with one line.
    assert "graphformer: process 1 was killed by SIGKILL; " in printed, printed[-3000:]
    invoked = f"{sys.executable} -m graphformer"  # the hint names the command as it was started
    assert f"continue from the last checkpoint with: {invoked} train --processes 2 --out {run} --resume" in printed


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_processes_whose_launcher_is_killed_stop_after_their_step_with_a_checkpoint(tmp_path):
    """kill -9 of `graphformer` itself leaves no process training on its own: each gets a SIGTERM
    from Linux (PR_SET_PDEATHSIG) and they stop as after a Ctrl-C."""
    data = small_copy_data(tmp_path / "data")
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log, workers = tmp_path / "ddp.log", []

    def kill_launcher(launcher: int) -> None:
        workers.extend(_worker(launcher, local_rank=rank) for rank in (0, 1))
        os.kill(launcher, signal.SIGKILL)

    try:
        _signal_after_steps(_processes_run(data, run), env, run, log, kill_launcher)
        deadline = time.monotonic() + 120
        while "interrupted at step" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:  # on a failure, leave no orphan training on
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    steps = read_jsonl(run / "steps.jsonl")
    assert f"interrupted at step {steps[-1]['step']}; checkpoint written" in log.read_text()
    assert checkpoint.load(run / LAST)["progress"]["step"] == steps[-1]["step"]


def _signal_after_steps(command: list[str], env: dict, run, log, send) -> tuple[str, int]:
    """Start ``command``, call ``send(pid)`` once the run has logged 3 steps, and wait for the end:
    (what it printed, its exit status)."""
    with open(log, "w+") as out:
        launcher = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 180
            while len(read_jsonl(run / "steps.jsonl") if (run / "steps.jsonl").is_file() else []) < 3:
                assert launcher.poll() is None and time.monotonic() < deadline, "training did not start"
                time.sleep(0.2)
            send(launcher.pid)
            launcher.wait(timeout=120)
        finally:
            launcher.kill()
        out.seek(0)
        return out.read(), launcher.returncode


def _worker(agent: int, local_rank: int) -> int:
    """The pid of the worker process of this local rank that torchrun (or `train --processes`) started."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if parent == agent and f"LOCAL_RANK={local_rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no worker of local rank {local_rank} under process {agent}")


def _run(command: list[str], env: dict, log) -> subprocess.CompletedProcess:
    """Run to completion; on a hang, fail with what the processes printed so far."""
    with open(log, "w+") as out:
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, timeout=240)
        except subprocess.TimeoutExpired:
            out.seek(0)
            pytest.fail(f"{command[2]} did not finish in 240 s; it printed:\n{out.read()[-3000:]}")
        out.seek(0)
        return subprocess.CompletedProcess(command, done.returncode, stdout="", stderr=out.read())


@pytest.mark.slow
def test_two_processes_resume_exactly_with_dropout(tmp_path):
    """A checkpoint holds every rank's own random state and each rank restores its own: how far a
    dropout draw moves a generator can depend on the batch's size, and the ranks' batches differ.
    This guards that: a stopped and resumed run takes the uninterrupted run's steps."""
    data = small_copy_data(tmp_path / "data")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nproc_per_node=2",
        "-m",
        "graphformer",
        "train",
    ]
    common = [
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--batch-size",
        "8",
        "--dropout",
        "0.3",
        "--device",
        "cpu",
        *TINY_MODEL,
    ]
    for out, steps in (("whole", "8"), ("parts", "4")):
        done = _run(
            [*launch, *common, "--max-steps", steps, "--out", str(tmp_path / out)], env, tmp_path / f"{out}.log"
        )
        assert done.returncode == 0, done.stderr[-3000:]
    done = _run(
        [*launch, "--out", str(tmp_path / "parts"), "--resume", "--max-steps", "8"], env, tmp_path / "resume.log"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    whole, parts = (read_jsonl(tmp_path / out / "steps.jsonl") for out in ("whole", "parts"))
    assert [s["loss"] for s in parts] == [s["loss"] for s in whole] and len(whole) == 8


@pytest.mark.slow
def test_an_error_on_one_rank_ends_the_job_with_its_message(tmp_path):
    """Rank 0 alone writes checkpoints: a full disk there must not leave the ranks waiting for
    each other (rank 1 in the next collective, rank 0 in the group's barrier) until gloo's timeout."""
    data = small_copy_data(tmp_path / "data")
    script = tmp_path / "disk_full.py"
    script.write_text(
        "import sys\n"
        "from graphformer.cli import main\n"
        "from graphformer.training.run_dir import RunDir\n"
        "def full(self, state, best):\n"
        "    raise OSError(28, 'No space left on device')\n"
        "RunDir.save_checkpoint = full\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nproc_per_node=2",
        str(script),
        "train",
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--batch-size",
        "8",
        "--epochs",
        "3",
        "--device",
        "cpu",
        *TINY_MODEL,
        "--out",
        str(tmp_path / "run"),
    ]
    done = _run(command, env, tmp_path / "ddp.log")  # fails the test if it hangs for 240 s
    assert done.returncode != 0
    assert "graphformer: error: " in done.stderr and "No space left on device" in done.stderr, done.stderr[-3000:]
