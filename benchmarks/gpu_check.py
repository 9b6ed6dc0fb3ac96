"""GPU check: the gpu-marked tests, then training, decoding and long-sequence attention on CUDA.

``make gpu-check OUT=DIR`` runs this with the GPU machine's own Python and torch, from the
repository root without an install (graphformer from the source tree, the few pure-Python packages
that machine lacks from ``make gpu-wheels``'s wheels). Each stage runs in its own process under
its own time limit, and ``DIR/gpu.json`` is rewritten after every stage, and inside a stage after
every row: a stage that fails, hangs or crashes the process loses only its own unfinished row, and
a failing row is recorded with its error while the others go on. Stages:

* wheels: installs the carried wheels into a scratch folder on the stages' PYTHONPATH;
* imports: graphformer and the packages it reads at run time;
* tests: ``pytest -m gpu tests/gpu/test_gpu.py`` (junit XML beside gpu.json);
* training: every graph backend against ``torch.nn.Transformer`` (`benchmarks.gpu_training`);
* decoding: the fixed setting of ``benchmarks.decoding``, greedy and beam 5, per backend against
  the dense KV cache; tokens that differ from the dense peer's are counted, not fatal (GPU
  kernels round near-ties either way);
* long_sequences: the attention operator alone, blocked, torch, flex and masked SDPA at 4k and 16k;
* syncs: host syncs per training step (``benchmarks.syncs``).

Without a CUDA device the same command is a rehearsal: every stage runs on the CPU at a tiny
size, so a broken code path shows before device minutes are spent, and gpu.json marks each stage
``"cuda": "skipped: no CUDA device"``.

    python3 -m benchmarks.gpu_check --out DIR [--wheels build/gpu-wheels] [--stages NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import ROOT, command, versions, write_json

# Each stage's time limit, seconds; together under 7 minutes with the start and the wheels.
TIMEOUTS = {
    "wheels": 15,
    "imports": 20,
    "tests": 110,
    "training": 140,
    "decoding": 60,
    "long_sequences": 50,
    "syncs": 20,
}
CPU_SLOWER = 4  # the rehearsal's limits are this many times longer: a CPU runs even tiny stages slowly


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where gpu.json and gpu-tests.xml go")
    parser.add_argument(
        "--wheels",
        default=str(ROOT / "build" / "gpu-wheels"),
        help="wheels to install first (make gpu-wheels makes them)",
    )
    parser.add_argument("--stages", nargs="+", default=list(TIMEOUTS), choices=list(TIMEOUTS))
    parser.add_argument("--stage", help=argparse.SUPPRESS)  # in a stage's own process: which one
    parser.add_argument("--rows", help=argparse.SUPPRESS)  # ... and the file its rows go to
    args = parser.parse_args()
    if args.stage:
        return run_stage(args.stage, Path(args.rows), Path(args.out))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(scratch / "site"), str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
        ),
        "PYTHONUNBUFFERED": "1",
        "DGLBACKEND": "pytorch",
    }
    result = {
        "command": command("gpu_check", sys.argv[1:]),
        "python": platform.python_version(),
        "stages": {},
    }
    result.update(device_facts())
    write_json(out / "gpu.json", result)
    for name in args.stages:
        if name == "wheels":
            stage = install_wheels(Path(args.wheels), scratch / "site")
        else:
            stage = stage_process(name, scratch / f"{name}.json", out, env)
        if result["cuda_device"] is None and name not in ("wheels", "imports"):
            stage["cuda"] = "skipped: no CUDA device (rehearsed on the CPU at a tiny size)"
        result["stages"][name] = stage
        write_json(out / "gpu.json", result)
        print(f"gpu-check: {name:15s} {stage['status']:8s} {stage['seconds']:6.1f} s  {summary(stage)}", flush=True)
    failed = [name for name, stage in result["stages"].items() if stage["status"] != "ok"]
    print(f"gpu-check: wrote {out / 'gpu.json'}" + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def device_facts() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return {
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "versions": versions(cuda=torch.version.cuda),
    }


def summary(stage: dict) -> str:
    rows = stage.get("rows", [])
    errors = sum("error" in r for r in rows)
    return (
        f"{len(rows)} rows"
        + (f", {errors} with errors" if errors else "")
        + (f"; {stage['error']}" if stage.get("error") else "")
    )


def install_wheels(wheels: Path, site: Path) -> dict:
    """pip installs every wheel of ``wheels`` into ``site`` (no index, no dependencies: the GPU
    machine has every dependency but these)."""
    tic = time.perf_counter()
    found = sorted(str(p) for p in wheels.glob("*.whl"))
    if not found:
        return {"status": "failed", "seconds": 0.0, "error": f"no wheels in {wheels}: run make gpu-wheels here first"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(site),
            *found,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUTS["wheels"],
    )
    stage = {
        "status": "ok" if proc.returncode == 0 else "failed",
        "seconds": time.perf_counter() - tic,
        "wheels": [Path(p).name for p in found],
    }
    if proc.returncode:
        stage["error"] = last_line(proc.stderr)
    return stage


def stage_process(name: str, rows_file: Path, out: Path, env: dict) -> dict:
    """Runs one stage in a fresh process under its time limit; its rows come from ``rows_file``,
    which the stage rewrites after every row (so a timeout keeps the finished ones)."""
    tic = time.perf_counter()
    limit = TIMEOUTS[name] * (1 if cuda_visible() else CPU_SLOWER)
    cmd = [sys.executable, "-m", "benchmarks.gpu_check", "--stage", name, "--rows", str(rows_file), "--out", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env, cwd=ROOT)
        status = "ok" if proc.returncode == 0 else "failed"
        error = None if proc.returncode == 0 else last_line(proc.stderr) or f"exit status {proc.returncode}"
        log = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        status, error = "timeout", f"stopped at its {limit} s limit"
        log = (err.stdout or b"").decode(errors="replace") + (err.stderr or b"").decode(errors="replace")
    stage = {"status": status, "seconds": time.perf_counter() - tic, "timeout_s": limit}
    if error:
        stage["error"] = error
        stage["log_tail"] = log[-3000:]
    if rows_file.exists():
        stage.update(json.loads(rows_file.read_text()))
    return stage


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ----------------------------------------------------------------------------- inside a stage's process


def run_stage(name: str, rows_file: Path, out: Path) -> int:
    """Inside a stage's own process: runs it on CUDA, or on the CPU without it; 1 if it failed
    or any of its rows holds an error."""
    import torch

    from benchmarks import gpu_stages, gpu_training

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = gpu_stages.Rows(rows_file, device=str(device))
    stage = {
        "imports": gpu_stages.imports_stage,
        "tests": gpu_stages.tests_stage,
        "training": gpu_training.training_stage,
        "decoding": gpu_stages.decoding_stage,
        "long_sequences": gpu_stages.long_sequence_stage,
        "syncs": gpu_stages.syncs_stage,
    }[name]
    code = stage(device, rows, out)
    return code or (1 if any("error" in r for r in rows.data["rows"]) else 0)


if __name__ == "__main__":
    sys.exit(main())
