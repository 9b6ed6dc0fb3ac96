"""Faults from outside the program: a process of a run killed, a full disk or the file-size limit,
a run directory turned read-only, a damaged Multi30k cache, a checkpoint of another format
version, GPU random states. Each ends in one line that names what went wrong (exit status 2 at
the command line, no traceback), loses nothing written before it, and a run resumed after it
ends with the weights, and the log, of a run that never stopped.

The faults are real where this machine allows: the kernel's file-size limit (RLIMIT_FSIZE, with
SIGXFSZ ignored so that the write fails with EFBIG instead of killing the process), a tmpfs of
its own for a full disk, a read-only bind mount (chmod does not stop root). Mounting needs root:
without it the disk test is skipped and the read-only one refuses writes through a patched
``open`` instead.
"""

import builtins
import contextlib
import errno
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_MODEL, assert_same_last_weights, read_jsonl, small_copy_data

from graphformer.cli import main
from graphformer.data import multi30k
from graphformer.errors import UserError
from graphformer.training import checkpoint, distributed, random_states
from graphformer.training.run_dir import LAST, STEPS, RunDir

MIRROR = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_copy_data(tmp_path_factory.mktemp("faults") / "data", n_train=96)


def options(data) -> list[str]:
    """2 epochs of 6 steps; a checkpoint every 2 steps (so a fault mid-epoch has one before it),
    kept epochs and attention records (for `average` and the figures); dropout on (its random
    state must be restored for the resumed run to be exact)."""
    return [
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--batch-size",
        "16",
        "--epochs",
        "2",
        "--save-every",
        "2",
        "--keep-last",
        "2",
        "--viz-every",
        "1",
        *TINY_MODEL,
    ]


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory):
    """The run trained without a fault, that every faulted and resumed run must end as."""
    run = tmp_path_factory.mktemp("faults") / "straight"
    assert main(["train", *options(data), "--out", str(run)]) == 0
    return run


def losses(run) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_jsonl(run / STEPS)]


def assert_resumes_exactly(run, straight):
    assert main(["train", "--out", str(run), "--resume", "--quiet"]) == 0
    assert_same_last_weights(straight, run)
    assert losses(run) == losses(straight)  # every step logged once: none lost, none twice


def one_line(text: str, *needles: str) -> str:
    assert len(text.strip().splitlines()) == 1 and text.startswith("graphformer: error: "), text
    assert "Traceback" not in text
    for needle in needles:
        assert needle in text, text
    return text


def before_write(monkeypatch, what: str, step: int, fault) -> dict:
    """Call ``fault()`` once, just before the run writes step ``step``'s line of steps.jsonl
    (``what="log"``) or the checkpoint after that step (``"checkpoint"``); returns what it saw
    then: ``{"last": the bytes of checkpoint_last.pt}``."""
    seen = {}
    real_log, real_save = RunDir.log, RunDir.save_checkpoint

    def strike(run: RunDir):
        if not seen:
            seen["last"] = (run / LAST).read_bytes()
            fault()

    def log(self, name, record):
        if what == "log" and name == STEPS and record["step"] == step:
            strike(self)
        return real_log(self, name, record)

    def save_checkpoint(self, state, best):
        if what == "checkpoint" and state["progress"]["step"] == step:
            strike(self)
        return real_save(self, state, best)

    monkeypatch.setattr(RunDir, "log", log)
    monkeypatch.setattr(RunDir, "save_checkpoint", save_checkpoint)
    return seen


def assert_nothing_lost(run, seen: dict, step: int):
    """The checkpoint from before the fault is as it was, loads, and holds step ``step``; no
    temporary file is left beside it."""
    assert (run / LAST).read_bytes() == seen["last"]
    assert checkpoint.load(run / LAST)["progress"]["step"] == step
    assert not [p for p in run.rglob("*") if ".tmp-" in p.name]


# ---- the file-size limit and a full disk ------------------------------------------------------
@contextlib.contextmanager
def file_size_limit():
    """A function that sets this process's file-size limit (bytes) at once; the limit and SIGXFSZ's
    handler are restored on leaving. SIGXFSZ is ignored meanwhile: a write past the limit then
    fails with EFBIG instead of ending the process."""
    before, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield lambda size: resource.setrlimit(resource.RLIMIT_FSIZE, (size, before[1]))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
        signal.signal(signal.SIGXFSZ, handler)


def test_a_checkpoint_over_the_file_size_limit_is_one_line_and_the_last_one_stays(data, straight, tmp_path):
    """In a process of its own, as a user's shell with ``ulimit -f`` starts it: torch.save reports the
    failed write as a RuntimeError of its own, which must still read as the file that was too large."""
    run = tmp_path / "run"
    assert main(["train", *options(data), "--max-steps", "2", "--out", str(run)]) == 0
    last = (run / LAST).read_bytes()
    limit = 64 * 1024  # the logs and config.json fit; a checkpoint does not
    assert len(last) > limit

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited across exec: EFBIG, not death
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    done = subprocess.run(
        [sys.executable, "-m", "graphformer", "train", "--out", str(run), "--resume", "--max-steps", "12", "--quiet"],
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 2, done.stderr
    one_line(done.stderr, f"cannot write {run / LAST}: ", "too large", "file-size limit", "--resume")
    assert_nothing_lost(run, {"last": last}, step=2)
    assert_resumes_exactly(run, straight)


def test_a_log_line_over_the_file_size_limit_is_one_line(data, straight, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    with file_size_limit() as limit:
        seen = before_write(monkeypatch, "log", 3, lambda: limit((run / STEPS).stat().st_size + 10))  # half a line fits
        code = main(["train", *options(data), "--out", str(run)])
    assert code == 2
    one_line(capsys.readouterr().err, f"cannot write {run / STEPS}: ", "too large", "--resume")
    assert_nothing_lost(run, seen, step=2)
    monkeypatch.undo()
    assert_resumes_exactly(run, straight)  # the torn line is dropped


@pytest.fixture
def small_disk(tmp_path):
    """A folder on a tmpfs of its own (8 MiB); the test is skipped where mounting is not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> None:
    """Write zeros to ``disk/filler`` until the disk is full."""
    with open(disk / "filler", "wb", buffering=0) as f:
        with pytest.raises(OSError) as full:
            while True:
                f.write(bytes(1 << 20))
    assert full.value.errno == errno.ENOSPC


def test_a_checkpoint_on_a_full_disk_is_one_line_and_the_last_one_stays(
    data, straight, small_disk, monkeypatch, capsys
):
    run = small_disk / "run"
    seen = before_write(monkeypatch, "checkpoint", 4, lambda: fill(small_disk))
    assert main(["train", *options(data), "--out", str(run)]) == 2
    one_line(
        capsys.readouterr().err,
        f"cannot write {run / LAST}: ",
        "disk is full",
        "free some space",
        f"graphformer train --out {run} --resume",
    )
    assert_nothing_lost(run, seen, step=2)
    monkeypatch.undo()
    (small_disk / "filler").unlink()
    assert_resumes_exactly(run, straight)


@pytest.mark.parametrize(
    "command,output",
    [
        (["average", "--last", "2"], "average.pt"),
        (["heatmap", "--relation", "cross"], "figure.png"),
        (["animate", "--relation", "cross"], "animation.gif"),
    ],
)
def test_an_average_or_a_figure_over_the_file_size_limit_is_one_line_and_writes_nothing(
    straight, tmp_path, capsys, command, output
):
    target = tmp_path / output
    with file_size_limit() as limit:
        limit(2048)  # less than any of them
        code = main([command[0], str(straight), *command[1:], "-o", str(target)])
    assert code == 2
    one_line(capsys.readouterr().err, f"cannot write {target}: ", "too large", "run the command again")
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one


# ---- a read-only run directory ------------------------------------------------------------------
class ReadOnly:
    """Makes a folder read-only at once, even for root: a read-only bind mount of it where this
    process may mount, else (a stand-in) ``open`` refusing writes under it as a read-only file
    system would."""

    def __init__(self, monkeypatch):
        self.monkeypatch, self.mounted = monkeypatch, None

    def on(self, folder: Path) -> None:
        if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0:
            self.mounted = folder
            subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
            return
        real_open = builtins.open

        def refusing(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+") and Path(file).resolve().is_relative_to(folder.resolve()):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
            return real_open(file, mode, *args, **kwargs)

        self.monkeypatch.setattr(builtins, "open", refusing)

    def off(self) -> None:
        if self.mounted is not None:
            subprocess.run(["umount", str(self.mounted)], check=True)
            self.mounted = None


@pytest.fixture
def read_only(monkeypatch):
    guard = ReadOnly(monkeypatch)
    yield guard
    guard.off()


@pytest.mark.parametrize("what,step,name", [("log", 3, STEPS), ("checkpoint", 4, LAST)])
def test_a_run_directory_turned_read_only_mid_run_is_one_line(
    data, straight, tmp_path, monkeypatch, capsys, read_only, what, step, name
):
    run = tmp_path / "run"
    seen = before_write(monkeypatch, what, step, lambda: read_only.on(run))
    assert main(["train", *options(data), "--out", str(run)]) == 2
    one_line(capsys.readouterr().err, f"cannot write {run / name}: ", "read-only", "make it writable", "--resume")
    read_only.off()
    monkeypatch.undo()
    assert_nothing_lost(run, seen, step=2)
    assert_resumes_exactly(run, straight)


# ---- a process of a run killed ------------------------------------------------------------------
HOOK = """
import os, signal, time
if os.environ.get("RANK") == os.environ["KILL_RANK"]:
    from graphformer.training import checkpoint
    from graphformer.training.trainer import Trainer
    def die():
        with open(os.environ["KILL_MARK"], "w") as f:  # when it died, for the test to time the others' end
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    step = int(os.environ["KILL_AT_STEP"])
    train_step, save_atomic = Trainer.train_step, checkpoint.save_atomic
    def killed_before_step(self, batches, counts):
        if self.progress.step + 1 == step:
            die()
        return train_step(self, batches, counts)
    def killed_mid_write(state, path):
        if state.get("progress", {}).get("step") == step:
            checkpoint.write_atomic(path, lambda f: (f.write(b"half a checkpoint"), f.flush(), die()))
        return save_atomic(state, path)
    if os.environ["KILL_IN"] == "step":
        Trainer.train_step = killed_before_step
    else:
        checkpoint.save_atomic = killed_mid_write
"""


def processes_run(data, run) -> list[str]:
    """``train --processes 2`` of 6 steps (96 samples, 8 a batch, 2 a step), a checkpoint every 2."""
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
        "1",
        "--save-every",
        "2",
        "--device",
        "cpu",
        *TINY_MODEL,
        "--out",
        str(run),
    ]


@pytest.fixture(scope="module")
def processes_straight(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("faults") / "processes_straight"
    done = subprocess.run(
        processes_run(data, run),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    "rank,moment,step,resumes_from",
    [(1, "step", 5, 4), (0, "write", 4, 2)],
    ids=["rank 1 before step 5", "rank 0 writing step 4's checkpoint"],
)
def test_a_process_killed_mid_epoch_stops_the_other_within_seconds_and_the_run_resumes_exactly(
    data, processes_straight, tmp_path, rank, moment, step, resumes_from
):
    """kill -9 of one process (here: it kills itself at a chosen moment, through a sitecustomize
    module): the other is not left waiting in a collective (gloo's own timeout is 30 minutes);
    the launcher's line names the killed one and the command that continues; the checkpoint
    before stays whole, a half-written one is never taken, and the resumed run ends as one that
    was never stopped."""
    hook, run, mark = tmp_path / "hook", tmp_path / "run", tmp_path / "killed_at"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = {
        **env,
        "PYTHONPATH": str(hook),
        "KILL_RANK": str(rank),
        "KILL_AT_STEP": str(step),
        "KILL_IN": moment,
        "KILL_MARK": str(mark),
    }
    done = subprocess.run(processes_run(data, run), env=killed, capture_output=True, text=True, timeout=120)
    assert time.time() - float(mark.read_text()) < 30  # the other ended within seconds of the kill
    printed = done.stderr
    assert done.returncode == 128 + signal.SIGKILL and "Traceback" not in printed, printed[-3000:]
    assert f"graphformer: process {rank} was killed by SIGKILL; " in printed
    invoked = f"{sys.executable} -m graphformer"  # the hint names the command as it was started
    assert f"continue from the last checkpoint with: {invoked} train --processes 2 --out {run} --resume" in printed
    assert checkpoint.load(run / LAST)["progress"]["step"] == resumes_from
    assert bool(list(run.glob(".*.tmp-*"))) == (moment == "write")  # the half-written one, never renamed
    resumed = subprocess.run(
        [sys.executable, "-m", "graphformer", "train", "--processes", "2", "--out", str(run), "--resume", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not list(run.glob(".*.tmp-*"))
    assert_same_last_weights(processes_straight, run)
    assert losses(run) == losses(processes_straight)


# ---- the Multi30k cache ---------------------------------------------------------------------------
@pytest.mark.skipif(not MIRROR.is_dir(), reason="needs the Multi30k mirror in ../shared/data/multi30k")
def test_a_truncated_or_altered_file_in_the_multi30k_cache_is_named_and_fetched_again_never_used(tmp_path, capsys):
    sums = dict(reversed(line.split()) for line in (MIRROR / "SHA256SUMS").read_text().splitlines())
    assert all(sums[name] == digest for name, digest in multi30k.SHA256.items())  # the mirror's are the pinned ones
    cache = multi30k.fetch(mirror=MIRROR, cache=tmp_path / "cache")
    truncated, altered = cache / "val.de.gz", cache / "train.en.gz"
    truncated.write_bytes(truncated.read_bytes()[:1000])
    data = bytearray(altered.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte: same size, same name, other contents
    altered.write_bytes(bytes(data))
    capsys.readouterr()
    multi30k.fetch(mirror=MIRROR, cache=cache)
    err = capsys.readouterr().err
    for path in (truncated, altered):
        assert f"graphformer: warning: {path} does not match its pinned SHA-256" in err and str(MIRROR) in err, err
        assert multi30k.sha256_of(path) == multi30k.SHA256[path.name]
    assert len(err.splitlines()) == 2 and not [p for p in cache.iterdir() if "partial" in p.name]
    # a damaged cache file and a damaged mirror: an error naming the mirror's file; the cache's is not kept as good
    bad_mirror = tmp_path / "bad_mirror"
    shutil.copytree(MIRROR, bad_mirror)
    (bad_mirror / "val.de.gz").chmod(0o644)
    (bad_mirror / "val.de.gz").write_bytes(b"not gzip")
    truncated.write_bytes(truncated.read_bytes()[:1000])
    with pytest.raises(UserError, match=f"val.de.gz is corrupt or truncated .*replace it in the mirror {bad_mirror}"):
        multi30k.fetch(mirror=bad_mirror, cache=cache)
    assert multi30k.sha256_of(truncated) != multi30k.SHA256["val.de.gz"]  # still bad, and checked again next time


# ---- a checkpoint of another format version --------------------------------------------------------
@pytest.mark.parametrize(
    "version,why",
    [
        (checkpoint.VERSION + 1, "a newer graphformer wrote it: upgrade"),
        (checkpoint.VERSION - 1, "an older graphformer wrote it"),
    ],
)
def test_a_checkpoint_of_another_format_version_is_named_with_both_versions(straight, tmp_path, capsys, version, why):
    from graphformer import __version__

    run = tmp_path / "run"
    shutil.copytree(straight, run)
    state = torch.load(run / LAST, weights_only=True)
    state["format"] = f"graphformer-checkpoint-{version}"
    del state["model"]  # what a change of format may do: a reader of this version must not reach for it
    torch.save(state, run / LAST)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    needles = (
        str(run / LAST),
        f"format version {version}",
        f"({__version__}) reads version {checkpoint.VERSION}",
        why,
    )
    for command in (["evaluate", str(run), "--checkpoint", "last"], ["train", "--out", str(run), "--resume"]):
        assert main(command) == 2
        one_line(capsys.readouterr().err, *needles)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


# ---- GPU random states: each rank's own device, none on the CPU ------------------------------------
class FakeCuda:
    """Stand-ins for torch.cuda's device and RNG functions that record every call."""

    NAMES = (
        "get_rng_state",
        "set_rng_state",
        "get_rng_state_all",
        "set_rng_state_all",
        "device_count",
        "current_device",
    )

    def __init__(self, monkeypatch, states=None):
        self.calls, self.states = [], states or {}
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # asked by Adam's step there
        for name in self.NAMES:
            monkeypatch.setattr(torch.cuda, name, self._recorder(name))

    def _recorder(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, *args, *kwargs.values()))
            if name == "get_rng_state":
                return self.states[str(args[0] if args else kwargs["device"])]
            return 2 if name == "device_count" else None

        return record


def test_a_cpu_run_on_a_gpu_host_reads_and_restores_no_gpu_state(data, tmp_path, monkeypatch):
    run = tmp_path / "run"
    cuda = FakeCuda(monkeypatch)
    assert main(["train", *options(data), "--device", "cpu", "--max-steps", "2", "--out", str(run)]) == 0
    state = checkpoint.load(run / LAST)
    assert state["rng"]["cuda_by_rank"] is None and "cuda" not in state["rng"]
    assert len(state["rng"]["torch_by_rank"]) == 1
    # An earlier graphformer's checkpoint (rank 0's CPU state, and every visible GPU's) resumes on the CPU too.
    state["rng"] = {
        "torch": state["rng"]["torch"],
        "python": state["rng"]["python"],
        "cuda": [torch.zeros(16, dtype=torch.uint8)] * 2,
    }
    checkpoint.save_atomic({k: v for k, v in state.items() if k != "format"}, run / LAST)
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "3", "--quiet"]) == 0
    assert cuda.calls == []


def gpu_rank(rank: int, world: int, device: str = "cuda") -> distributed.Context:
    """The context of rank ``rank`` of ``world``, on that rank's GPU (or the CPU)."""
    where = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    return distributed.Context(rank=rank, world=world, device=where)


def rng(**entries) -> dict:
    """A checkpoint's random states: this process's CPU and Python ones, and ``entries``."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(), **entries}


def test_each_rank_saves_and_restores_its_own_gpus_random_state_only(monkeypatch):
    mine, rank0s = torch.full((16,), 1, dtype=torch.uint8), torch.full((16,), 0, dtype=torch.uint8)
    cuda = FakeCuda(monkeypatch, states={"cuda:1": mine})
    cpu0 = torch.get_rng_state()
    monkeypatch.setattr(distributed, "all_gather", lambda value, ctx: [(cpu0, rank0s), value])  # rank 0's from rank 0
    saved = random_states.by_rank(gpu_rank(1, 2))
    assert saved["cuda_by_rank"] == [rank0s, mine] and saved["torch_by_rank"][1].equal(torch.get_rng_state())
    assert cuda.calls == [("get_rng_state", torch.device("cuda", 1))]

    def restored(states: dict, rank: int = 1, world: int = 2, device: str = "cuda"):
        cuda.calls.clear()
        random_states.restore(states, gpu_rank(rank, world, device))
        return cuda.calls

    own = [("set_rng_state", mine, torch.device("cuda", 1))]
    assert restored(rng(cuda_by_rank=[rank0s, mine])) == own
    smaller = [("set_rng_state", rank0s, torch.device("cuda", 1))]
    assert restored(rng(cuda_by_rank=[rank0s])) == smaller  # a run of fewer processes: rank 0's
    # an earlier graphformer's checkpoint: rank 0's view of every GPU; this rank's GPU's entry
    assert restored(rng(cuda=[rank0s, mine, rank0s])) == own
    assert restored(rng(cuda=[rank0s])) == []  # written where fewer GPUs were visible: nothing to raise about
    assert restored(rng(cuda=None)) == restored(rng(cuda_by_rank=None)) == []  # a CPU run's
    assert restored(rng(cuda_by_rank=[rank0s, mine]), rank=0, world=1, device="cpu") == []
    cuda.calls.clear()
    assert random_states.by_rank(gpu_rank(0, 1, "cpu"))["cuda_by_rank"] is None and cuda.calls == []


def test_each_rank_restores_its_own_cpu_random_state(monkeypatch):
    """How far a draw moves the CPU generator can depend on its size, and each rank has its own batches."""
    states = [torch.Generator().manual_seed(seed).get_state() for seed in (10, 11)]
    for rank, world in ((0, 2), (1, 2), (1, 3)):
        random_states.restore(rng(torch_by_rank=states), gpu_rank(rank, world, "cpu"))
        assert torch.get_rng_state().equal(states[rank])
    earlier = rng()  # an earlier graphformer's: rank 0's state, for every rank
    random_states.restore({**earlier, "torch": states[0]}, gpu_rank(1, 2, "cpu"))
    assert torch.get_rng_state().equal(states[0])
