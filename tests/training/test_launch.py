"""``train --processes N`` (`graphformer.training.launch`): what each process is given, the
signals passed on to them, which one is blamed when a run fails, and processes that follow their
launcher. Stand-in processes (plain Python scripts, no training) keep these fast."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from graphformer.invocation import COMMAND
from graphformer.training import launch as launcher
from graphformer.training.launch import LAUNCHER_PID, LOOPBACK, Launch, process_environment, run_processes

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the launcher's death signal is Linux's")

# Stands in for `python -m graphformer ...`: records what it was given, then exits with the status
# FAKE_EXIT gives its rank, or, with FAKE_WAIT, once a signal has come (recording each signal).
FAKE_PROCESS = """
import json, os, signal, sys, time
from graphformer.training.launch import LAUNCHER_PID
out = os.path.join(os.environ["FAKE_OUT"], "rank" + os.environ["RANK"])
received = []
def record(signum, frame):
    received.append(signal.Signals(signum).name)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, record)
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", LAUNCHER_PID)
seen = {"argv": sys.argv[1:], "env": {n: os.environ[n] for n in names}, "pgid": os.getpgid(0), "pid": os.getpid()}
with open(out + ".json", "w") as f:
    json.dump(seen, f)
if os.environ.get("FAKE_WAIT"):
    deadline = time.time() + 60
    while not received and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # any further signal arrives meanwhile
    with open(out + ".signals", "w") as f:
        json.dump(received, f)
    sys.exit(130)
sys.exit(json.loads(os.environ.get("FAKE_EXIT", "{}")).get(os.environ["RANK"], 0))
"""


@pytest.fixture
def fake_graphformer(tmp_path, monkeypatch):
    """``sys.executable`` replaced by `FAKE_PROCESS`, which writes into the returned folder."""
    script = tmp_path / "fake_python"
    script.write_text(f"#!{sys.executable}\n{FAKE_PROCESS}")
    script.chmod(0o755)
    out = tmp_path / "seen"
    out.mkdir()
    monkeypatch.setattr(sys, "executable", str(script))
    monkeypatch.setenv("FAKE_OUT", str(out))
    return out


def seen_by(out: Path, processes: int) -> list[dict]:
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(processes)]


def test_each_process_gets_the_command_line_and_what_torchrun_would_set(fake_graphformer):
    argv = ["train", "--task", "copy", "--out", "runs/a b", "--processes", "3"]
    assert run_processes(argv, 3, "RESUME") == 0
    seen = seen_by(fake_graphformer, 3)
    assert all(s["argv"] == ["-m", "graphformer", *argv] for s in seen)
    assert [(s["env"]["RANK"], s["env"]["LOCAL_RANK"]) for s in seen] == [("0", "0"), ("1", "1"), ("2", "2")]
    assert {(s["env"]["WORLD_SIZE"], s["env"]["LOCAL_WORLD_SIZE"], s["env"]["MASTER_ADDR"]) for s in seen} == {
        ("3", "3", "127.0.0.1")
    }
    assert len({s["env"]["MASTER_PORT"] for s in seen}) == 1  # one meeting point
    assert {s["env"][LAUNCHER_PID] for s in seen} == {str(os.getpid())}


def test_the_processes_share_a_process_group_of_their_own(fake_graphformer):
    """A Ctrl-C on the terminal reaches the launcher's group only; `kill -- -PGID` reaches every process."""
    assert run_processes(["train"], 2, "RESUME") == 0
    seen = seen_by(fake_graphformer, 2)
    assert seen[0]["pgid"] == seen[1]["pgid"] == seen[0]["pid"] != os.getpgid(0)


def test_a_failed_process_s_status_is_the_launch_s(fake_graphformer, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_EXIT", json.dumps({"1": 4}))
    assert run_processes(["train"], 2, "RESUME") == 4
    assert capsys.readouterr().err == ""  # the process says why itself: no launcher's words, no traceback


def send_when_ready(out: Path, processes: int, *signals: int) -> threading.Thread:
    """Send ``signals`` to this process (the launcher) once every stand-in has started."""

    def send():
        deadline = time.time() + 60
        while len(list(out.glob("rank*.json"))) < processes and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # the last one has written its file whole
        for sig in signals:
            os.kill(os.getpid(), sig)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP")
def test_a_signal_to_the_launcher_reaches_each_process_once_and_an_ignored_one_none(fake_graphformer, monkeypatch):
    """Under nohup SIGHUP stays ignored; a Ctrl-C is passed on once (twice would abort the run)."""
    monkeypatch.setenv("FAKE_WAIT", "1")
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        sender = send_when_ready(fake_graphformer, 2, signal.SIGHUP, signal.SIGINT)
        assert run_processes(["train"], 2, "RESUME") == 130
        sender.join()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous_hup)
    received = [json.loads((fake_graphformer / f"rank{rank}.signals").read_text()) for rank in range(2)]
    assert received == [["SIGINT"], ["SIGINT"]]
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers  # the caller's own again


def test_the_environment_keeps_the_callers_and_a_chosen_gloo_interface(monkeypatch):
    monkeypatch.setenv("GRAPHFORMER_TEST_VARIABLE", "kept")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    env = process_environment(1, 2, 29500)
    assert env["GRAPHFORMER_TEST_VARIABLE"] == "kept" and env["GLOO_SOCKET_IFNAME"] == LOOPBACK
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("1", "2", "29500")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert process_environment(0, 2, 29500)["GLOO_SOCKET_IFNAME"] == "eth7"


def test_each_process_is_told_the_command_the_user_started(monkeypatch):
    """The processes run ``python -m graphformer``; their hints (continue with: ...) must name the
    command the user typed."""
    monkeypatch.delenv(COMMAND, raising=False)
    monkeypatch.setattr(sys, "argv", [".venv/bin/graphformer", "train"])
    assert process_environment(0, 2, 29500)[COMMAND] == ".venv/bin/graphformer"


def test_the_meeting_port_is_free_to_listen_on():
    port = launcher.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


# ---- which process is blamed, and when the others are stopped -------------------------------------
def test_a_processes_run_blames_a_process_killed_from_outside_before_the_ones_that_lost_it():
    """When one process is killed, the others fail on the lost connection within the same moment:
    the launcher reports the killed one (and its status), not the lowest rank that failed. A
    process ended by a signal the launcher passed on was not killed from outside."""

    def first_failure(*codes, passed_on=()):
        launch = Launch()
        launch.ranks, launch.passed_on = [SimpleNamespace(returncode=c) for c in codes], set(passed_on)
        return launch.first_failure()

    assert first_failure(1, -9) == 1
    assert first_failure(3, 2) == 1  # 3: rank 0 only lost rank 1, whose own error is 2
    assert first_failure(1, -15, passed_on=[15]) == 0
    assert first_failure(None, 2, 1) == 1
    assert first_failure(0, None) is None
    assert first_failure(130, 130) == 0


def _launch_of(*scripts: str):
    """A `Launch` of Python processes running these scripts (stand-ins for training processes)."""
    launch = Launch()
    launch.ranks = [subprocess.Popen([sys.executable, "-c", script]) for script in scripts]
    return launch


def test_the_launcher_stops_the_others_at_once_when_a_process_is_killed_from_outside(capsys, monkeypatch):
    """Whatever its rank: a higher one killed while a lower one runs is noticed, and the lower one
    is stopped at once, without the grace period an error gets (an hour here: waiting it out,
    rank 0 would end by itself, with status 0)."""
    monkeypatch.setattr(launcher, "GRACE_SECONDS", 3600.0)
    launch = _launch_of("import time; time.sleep(60)", "import os; os.kill(os.getpid(), 9)")
    assert launch.wait("RESUME") == 128 + 9
    assert launch.ranks[0].returncode == -9
    assert capsys.readouterr().err == (
        "graphformer: process 1 was killed by SIGKILL; the other processes were "
        "stopped; continue from the last checkpoint with: RESUME\n"
    )


def test_the_launcher_gives_the_others_time_to_exit_after_an_error_then_stops_them(capsys, monkeypatch):
    """A process that fails with its own message (status 2) leaves the others a grace period to
    report theirs; one still running after it is killed, and the status is the failed one's."""
    monkeypatch.setattr(launcher, "GRACE_SECONDS", 1.0)
    launch = _launch_of(
        "import time; time.sleep(60)", "import sys, time; time.sleep(1); sys.exit(2)", "import sys; sys.exit(0)"
    )  # done long before the failure
    assert launch.wait("RESUME") == 2
    assert [p.returncode for p in launch.ranks] == [-9, 2, 0] and capsys.readouterr().err == ""


def test_a_signal_passed_on_ends_the_run_with_its_status_and_no_blame(capsys):
    launch = _launch_of("import time; time.sleep(60)", "import time; time.sleep(60)")
    assert launch.pass_on(signal.SIGTERM)
    assert launch.wait("RESUME") == 128 + signal.SIGTERM
    assert not launch.pass_on(signal.SIGTERM)  # none left to reach
    assert capsys.readouterr().err == ""


# ---- a process follows its launcher ---------------------------------------------------------------
FOLLOWER = """
import os, pathlib, signal, sys, time
from graphformer.training.launch import follow_launcher
mark = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *args: (mark.write_text("SIGTERM"), sys.exit(0)))
follow_launcher()
pathlib.Path(sys.argv[1] + ".ready").write_text(str(os.getpid()))
time.sleep(60)
"""

LAUNCHER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env={**os.environ, sys.argv[3]: str(os.getpid())})
time.sleep(60)
"""


def wait_for(path: Path, seconds: float = 60) -> bool:
    deadline = time.time() + seconds
    while not path.exists() and time.time() < deadline:
        time.sleep(0.05)
    return path.exists()


@linux_only
def test_a_process_whose_launcher_dies_is_asked_to_stop(tmp_path):
    mark = tmp_path / "mark"
    launch = subprocess.Popen([sys.executable, "-c", LAUNCHER, FOLLOWER, str(mark), LAUNCHER_PID])
    ready = Path(f"{mark}.ready")
    try:
        assert wait_for(ready) and not mark.exists()  # its launcher lives: it trains on
        launch.kill()
        launch.wait()
        assert wait_for(mark) and mark.read_text() == "SIGTERM"
    finally:
        launch.kill()
        if ready.exists() and not mark.exists():
            os.kill(int(ready.read_text()), signal.SIGKILL)


@linux_only
def test_a_process_whose_launcher_died_before_it_asked_stops_at_once(tmp_path):
    env = {**os.environ, LAUNCHER_PID: "1"}  # not its parent: the launcher is gone
    follower = subprocess.run([sys.executable, "-c", FOLLOWER, str(tmp_path / "mark")], env=env, timeout=60)
    assert follower.returncode == 0 and (tmp_path / "mark").read_text() == "SIGTERM"
    assert not Path(f"{tmp_path / 'mark'}.ready").exists()


def test_a_process_started_otherwise_follows_no_launcher(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != LAUNCHER_PID}
    script = "from graphformer.training.launch import follow_launcher; follow_launcher(); print('trains on')"
    follower = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert (follower.returncode, follower.stdout) == (0, "trains on\n")
