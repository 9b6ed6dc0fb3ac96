"""CPU threads (`graphformer.training.threads`): OpenMP spins briefly on free cores and sleeps at
once on busy ones unless the user chose how it waits, the ``graphformer`` command sets that before torch loads OpenMP, and evaluate and
translate compute with the threads training would take."""

import os
import re
import subprocess
import sys
import time

import pytest
import torch
from helpers import TINY_MODEL, small_copy_data

from graphformer.cli import main
from graphformer.training.threads import BUSY_CORES_WAIT, FREE_CORES_WAIT, WAIT_SETTINGS, choose_wait, others_busy_cores


def test_openmp_spins_briefly_on_free_cores_sleeps_on_busy_ones_unless_the_environment_chose():
    environ = {}
    assert choose_wait(environ, torch_loaded=False, others_busy=lambda: 0.4, cores=2) == FREE_CORES_WAIT == environ
    assert FREE_CORES_WAIT == {"GOMP_SPINCOUNT": "10000"}
    environ = {}
    assert choose_wait(environ, torch_loaded=False, others_busy=lambda: 1.0, cores=2) == BUSY_CORES_WAIT == environ
    assert BUSY_CORES_WAIT == {"OMP_WAIT_POLICY": "passive"}
    assert choose_wait({}, torch_loaded=False, others_busy=lambda: 1.0, cores=4) == FREE_CORES_WAIT  # half of 4 is 2
    for chosen in ({"OMP_WAIT_POLICY": "active"}, {"GOMP_SPINCOUNT": "1000"}):
        environ = dict(chosen)
        assert choose_wait(environ, torch_loaded=False, others_busy=lambda: 0.0, cores=2) == {} and environ == chosen
    environ = {}  # torch's OpenMP has read its settings already: setting one now would only mislead
    assert choose_wait(environ, torch_loaded=True, others_busy=lambda: 0.0, cores=2) == {} and environ == {}


@pytest.mark.parametrize(
    "given, spins",
    [
        ({}, "0|10000"),  # the command's choice: passive (0) on busy cores, a short spin on free ones
        ({"GOMP_SPINCOUNT": "1000"}, "1000"),
        ({"OMP_WAIT_POLICY": "active"}, "30000000000"),  # libgomp's "spin for ever"
    ],
)
def test_the_command_sets_the_wait_before_torch_loads_openmp(tmp_path, given, spins):
    """libgomp reports the spin count it read when it was loaded (OMP_DISPLAY_ENV=verbose)."""
    data = small_copy_data(tmp_path / "data", n_train=16)
    env = {k: v for k, v in os.environ.items() if k not in WAIT_SETTINGS}
    env |= {**given, "OMP_DISPLAY_ENV": "verbose", "OMP_NUM_THREADS": "1"}
    command = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(tmp_path / "run")]
    command += ["--max-steps", "1", "--batch-size", "8", *TINY_MODEL]
    proc = subprocess.run([sys.executable, "-m", "graphformer", *command], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    read = set(re.findall(r"GOMP_SPINCOUNT = '(\d+)'", proc.stderr))
    assert len(read) == 1 and re.fullmatch(spins, read.pop()), proc.stderr[-2000:]


def test_evaluate_and_translate_take_the_threads_training_would(tmp_path, monkeypatch):
    data = small_copy_data(tmp_path / "data", n_train=16)
    run = tmp_path / "run"
    train = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--max-steps", "1"]
    decode = [["evaluate", str(run)], ["translate", str(run), "--input", str(data / "test.src"), "--quiet"]]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's choice for one process
    given = torch.get_num_threads()  # torch's threads are the process's: the test puts them back
    try:
        assert main([*train, "--batch-size", "8", "--threads", "2", *TINY_MODEL]) == 0
        for command in decode:
            torch.set_num_threads(2)
            assert main(command) == 0
            assert torch.get_num_threads() == 1, command
    finally:
        torch.set_num_threads(given)


def test_the_cores_others_keep_busy_are_measured_beside_a_busy_loop():
    """A process spinning on one core while this one sleeps shows as about one busy core."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let it start spinning
        busy = max(others_busy_cores(0.5) for _ in range(3))
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.6 <= busy <= len(os.sched_getaffinity(0)) + 0.5, busy
