"""GPU check: the gpu-marked tests, then training, decoding and long-sequence attention on CUDA.

``make gpu-check OUT=DIR`` runs this with the GPU machine's own Python and torch (graphformer
from the source tree, the few pure-Python packages that machine lacks from ``make gpu-wheels``'s
wheels). Each stage runs in its own process under its own time limit, and ``DIR/gpu.json`` is
rewritten after every stage, and inside a stage after every row: a stage that fails, hangs or
crashes the process loses only its own unfinished row, and a failing row is recorded with its
error while the others go on. Stages:

* wheels: installs the carried wheels into a scratch folder on the stages' PYTHONPATH;
* imports: graphformer and the packages it reads at run time;
* tests: ``pytest -m gpu tests/gpu/test_gpu.py`` (junit XML beside gpu.json);
* training: target tokens/s of every graph backend against ``torch.nn.Transformer`` on the same
  batches, in float32, TF32 and bfloat16 (autocast), at the copy configuration of
  ``training_throughput.py`` and the Multi30k GPU recipe's model and batch size
  (``examples/multi30k/gpu.yaml``, on random sentences of Multi30k's lengths: speed does not
  depend on which words they are);
* decoding: ``decoding.py``'s fixed setting, greedy and beam 5, incremental graph decoding per
  backend against the dense KV cache; tokens that differ from the dense peer's are counted, not
  fatal (GPU kernels round near-ties either way);
* long_sequences: the attention operator alone, forward + backward, blocked, torch, flex and
  masked SDPA on window and BigBird patterns of 4k and 16k tokens;
* syncs: host syncs per training step (``syncs.py``).

Without a CUDA device the same command is a rehearsal: every stage runs on the CPU at a tiny
size, so a broken code path shows before device minutes are spent, and gpu.json marks each stage
``"cuda": "skipped: no CUDA device"``.

    python benchmarks/gpu_check.py --out DIR [--wheels build/gpu-wheels] [--budget 420]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from provenance import versions

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
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
RUNTIME_PACKAGES = ["yaml", "tqdm", "networkx", "matplotlib", "sacrebleu", "sentencepiece", "sacremoses"]


# ----------------------------------------------------------------------------- the orchestrator


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
        "command": " ".join(["python benchmarks/gpu_check.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "stages": {},
    }
    result.update(device_facts())
    write(out / "gpu.json", result)
    for name in args.stages:
        if name == "wheels":
            stage = install_wheels(Path(args.wheels), scratch / "site")
        else:
            stage = stage_process(name, scratch / f"{name}.json", out, env)
        if result["cuda_device"] is None and name not in ("wheels", "imports"):
            stage["cuda"] = "skipped: no CUDA device (rehearsed on the CPU at a tiny size)"
        result["stages"][name] = stage
        write(out / "gpu.json", result)
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


def write(path: Path, result: dict) -> None:
    """Rewrites ``path`` whole (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


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
    cmd = [sys.executable, __file__, "--stage", name, "--rows", str(rows_file), "--out", str(out)]
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


class Rows:
    """A stage's rows, rewritten to their file after each one."""

    def __init__(self, path: Path, **facts):
        self.path, self.data = path, {**facts, "rows": []}
        write(self.path, self.data)

    def add(self, row: dict) -> dict:
        self.data["rows"].append(row)
        write(self.path, self.data)
        return row

    def attempt(self, row: dict, measure) -> dict:
        """``row`` updated with ``measure()``'s figures, or with the error it raised."""
        try:
            row.update(measure())
        except Exception as err:  # noqa: BLE001 - one failing row must not stop the others
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400]
            row["where"] = traceback.format_exc(limit=-3)[-800:]
        print(json.dumps(row), flush=True)
        return self.add(row)


def run_stage(name: str, rows_file: Path, out: Path) -> int:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = Rows(rows_file, device=str(device))
    stage = {
        "imports": imports_stage,
        "tests": tests_stage,
        "training": training_stage,
        "decoding": decoding_stage,
        "long_sequences": long_sequence_stage,
        "syncs": syncs_stage,
    }[name]
    code = stage(device, rows, out)
    return code or (1 if any("error" in r for r in rows.data["rows"]) else 0)


def imports_stage(device, rows: Rows, out: Path):
    import importlib

    for module in ["graphformer", "graphformer.cli", *RUNTIME_PACKAGES]:
        rows.attempt({"module": module}, lambda m=module: {"file": str(importlib.import_module(m).__file__)})


def tests_stage(device, rows: Rows, out: Path):
    xml = out / "gpu-tests.xml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "gpu",
            "-rs",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            "tests/gpu/test_gpu.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    rows.add({"pytest": tail, "returncode": proc.returncode, "junit_xml": xml.name})
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    return 0 if proc.returncode in (0, 5) else 1  # 5: nothing ran (every test skipped without CUDA)


def timed(fn, device, repeats: int = 1) -> tuple[float, int]:
    """(seconds of ``repeats`` calls after one warm-up, peak device bytes during them; 0 on a CPU)."""
    import torch

    fn()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    tic = time.perf_counter()
    for _ in range(repeats):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - tic, torch.cuda.max_memory_allocated() if cuda else 0


# Training: (model options, batches) per configuration; the CPU rehearsal shrinks both.
def training_configs(device) -> dict:
    from graphformer.cli import read_config_file

    gpu_model, gpu_train = read_config_file(str(ROOT / "examples" / "multi30k" / "gpu.yaml"))
    sizes = ("layers", "d_model", "heads", "d_ff", "dropout")
    configs = {
        "copy": ({"layers": 1, "d_model": 512, "heads": 8, "d_ff": 2048, "dropout": 0.1}, {"sentences": 128}),
        "multi30k gpu recipe": ({k: gpu_model[k] for k in sizes}, {"tokens": gpu_train["batch_tokens"]}),
    }
    if device.type == "cpu":  # the rehearsal: the code paths, at a size a CPU runs in seconds
        tiny = {"layers": 1, "d_model": 32, "heads": 4, "d_ff": 64, "dropout": 0.1}
        configs = {"copy": (tiny, {"sentences": 8}), "multi30k gpu recipe": (tiny, {"tokens": 200})}
    return configs


def random_batches(steps: int, vocab: int, sizing: dict, seed: int = 0):
    """``steps`` batches of (sources, targets): copy-task pairs, or Multi30k-like lengths
    (sources 8-20 tokens, targets 8-22) filling ``tokens`` target tokens."""
    rng = random.Random(seed)
    batches = []
    for _ in range(steps):
        src, tgt = [], []
        while (len(src) < sizing["sentences"]) if "sentences" in sizing else (sum(map(len, tgt)) < sizing["tokens"]):
            n = rng.randint(8, 20)
            s = [rng.randrange(4, vocab) for _ in range(n)]
            src.append(s)
            tgt.append(s if "sentences" in sizing else [rng.randrange(4, vocab) for _ in range(rng.randint(8, 22))])
        batches.append((src, tgt))
    return batches


PRECISIONS = {"float32": ("highest", "float32"), "tf32": ("high", "float32"), "bfloat16": ("highest", "bfloat16")}


def training_stage(device, rows: Rows, out: Path):
    import torch
    from training_throughput import DensePeer, dense_loss, graph_loss

    from graphformer import make_model
    from graphformer.attention import BACKENDS, check_backend_trains, unavailable
    from graphformer.errors import UserError
    from graphformer.precision import autocast

    steps = 10 if device.type == "cuda" else 2
    vocab = 8000 if device.type == "cuda" else 40
    for config, (model_opts, sizing) in training_configs(device).items():
        batches = random_batches(steps, vocab, sizing)
        tokens = sum(len(t) + 1 for _, tgt in batches for t in tgt)
        torch.manual_seed(0)
        graph = make_model(vocab, **model_opts).to(device)
        dense = DensePeer(vocab, **model_opts).to(device)
        pool = graph.make_pool()
        for precision, (matmul, dtype) in PRECISIONS.items():
            torch.set_float32_matmul_precision(matmul)
            dense_rate = None
            for system in [*(b for b in BACKENDS if b != "auto"), "dense nn.Transformer"]:
                row = {
                    "config": config,
                    "precision": precision,
                    "system": system,
                    "steps": steps,
                    "target_tokens": tokens,
                    **model_opts,
                    **sizing,
                }
                reason = None if system.startswith("dense") else unavailable(system)
                if reason is None and not system.startswith("dense"):
                    try:
                        check_backend_trains(system, device)
                    except UserError as err:
                        reason = str(err)
                if reason:
                    rows.add({**row, "skipped": reason})
                    continue
                model = dense if system.startswith("dense") else graph
                graph.attention_backend = "auto" if model is dense else system
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

                def epoch(model=model, optimizer=optimizer, dense=dense):
                    for src, tgt in batches:
                        with autocast(dtype, device):
                            loss, n = (
                                dense_loss(model, src, tgt, vocab, device)
                                if model is dense
                                else graph_loss(model, pool, src, tgt, device)
                            )
                        (loss / n).backward()
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)

                def measure():
                    seconds, peak = timed(epoch, device)
                    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "peak_memory_mib": peak / 2**20}

                rows.attempt(row, measure)
                if model is dense and "tokens_per_s" in row:
                    dense_rate = row["tokens_per_s"]
            for r in rows.data["rows"]:
                if (r["config"], r["precision"]) == (config, precision) and dense_rate and "tokens_per_s" in r:
                    r["ratio_to_dense"] = r["tokens_per_s"] / dense_rate
            write(rows.path, rows.data)
        del graph, dense
        if device.type == "cuda":
            torch.cuda.empty_cache()
    torch.set_float32_matmul_precision("highest")


def decoding_stage(device, rows: Rows, out: Path):
    import torch
    from decoding import FIXED_OUTPUT_TOKENS, dense_decode, fixed_model_and_sources, fixed_translate

    from graphformer.attention import BACKENDS, unavailable
    from graphformer.model.dense import to_torch_transformer

    sentences = 64 if device.type == "cuda" else 2
    model, src = fixed_model_and_sources(sentences, device)
    dense = to_torch_transformer(model).eval()
    for beam in (1, 5):

        def decode_dense():
            with torch.no_grad():
                return dense_decode(model, dense, src, beam, FIXED_OUTPUT_TOKENS)

        reference = [h.tokens for h in decode_dense()]
        methods = {f"graph incremental ({b})": b for b in BACKENDS if not unavailable(b)}
        for method, backend in [*methods.items(), ("dense KV cache", None)]:

            def run(backend=backend):
                if backend is None:
                    return decode_dense()
                model.attention_backend = backend
                return fixed_translate(model, src, beam)

            def measure(run=run):
                differ = mismatches([h.tokens for h in run()], reference)
                seconds, peak = timed(run, device)
                return {
                    "tokens_per_s": sentences * FIXED_OUTPUT_TOKENS / seconds,
                    "seconds": seconds,
                    "peak_memory_mib": peak / 2**20,
                    **differ,
                }

            rows.attempt({"beam": beam, "method": method, "sentences": sentences}, measure)
        dense_rate = rows.data["rows"][-1].get("tokens_per_s")
        for r in rows.data["rows"]:
            if r["beam"] == beam and dense_rate and "tokens_per_s" in r:
                r["ratio_to_dense"] = r["tokens_per_s"] / dense_rate
        write(rows.path, rows.data)


def mismatches(tokens: list[list[int]], reference: list[list[int]]) -> dict:
    """How far ``tokens`` are from the dense peer's: sentences that differ, and where the first
    difference is (a near-tie that a kernel's rounding flipped changes the rest of the output)."""
    differ = [i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b]
    first = [
        next(
            (t for t, (x, y) in enumerate(zip(tokens[i], reference[i])) if x != y),
            min(len(tokens[i]), len(reference[i])),
        )
        for i in differ
    ]
    return {"sentences_differing_from_dense": len(differ), "first_difference_at_step": first[:10]}


def long_sequence_stage(device, rows: Rows, out: Path):
    import torch
    from flex_attention import relation_of

    from graphformer.attention import blocked, flex, torch_ops
    from graphformer.graphs.relation import Relation

    heads, dim = 8, 64
    patterns = {"window": "window:128", "bigbird": "window:64+global:2+random:3"}
    lengths = [4096, 16384] if device.type == "cuda" else [256]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    attend = {"blocked": blocked.attend, "torch": torch_ops.attend, "flex": flex.attend}
    for spec in patterns.values():  # window, bigbird
        for L in lengths:
            cpu = relation_of(spec, L)
            relation = Relation.of_edges(cpu.u, cpu.v, cpu.num_keys, cpu.num_queries, device=device, verified=True)
            for method in ["blocked", "torch", "flex", "sdpa"]:
                row = {
                    "pattern": spec,
                    "L": L,
                    "method": method,
                    "dtype": str(dtype).split(".")[-1],
                    "heads": heads,
                    "dim": dim,
                }
                backward = device.type == "cuda" or method != "flex"  # flex has no backward on a CPU
                row["pass"] = "forward+backward" if backward else "forward"
                if method == "flex" and flex.unavailable():
                    rows.add({**row, "skipped": flex.unavailable()})
                    continue
                if method == "flex" and device.type == "cpu" and not flex.cpu_kernel_runs():
                    rows.add({**row, "skipped": "this CPU builds no FlexAttention kernel (torch >= 2.6, AVX2)"})
                    continue

                def measure(method=method, backward=backward):
                    n = relation.num_queries
                    q, k, v = (
                        torch.randn(n, heads, dim, device=device, dtype=dtype, requires_grad=backward) for _ in range(3)
                    )
                    call = (
                        sdpa_call(relation, q, k, v)
                        if method == "sdpa"
                        else (lambda: attend[method](relation, q, k, v))
                    )

                    def once():
                        out = call()
                        if backward:
                            out.float().sum().backward()

                    seconds, peak = timed(once, device, repeats=3)
                    return {"ms": 1e3 * seconds / 3, "peak_memory_mib": peak / 2**20, "edges": relation.num_edges}

                rows.attempt(row, measure)
    for r in rows.data["rows"]:
        sdpa = next(
            (
                s
                for s in rows.data["rows"]
                if (s["pattern"], s["L"], s["method"]) == (r["pattern"], r["L"], "sdpa") and "ms" in s
            ),
            None,
        )
        if sdpa and "ms" in r:
            r["speedup_over_masked_sdpa"] = sdpa["ms"] / r["ms"]
    write(rows.path, rows.data)


def sdpa_call(relation, q, k, v):
    """Masked scaled_dot_product_attention over the relation's edges as a dense (N, N) mask."""
    import torch

    n = relation.num_queries
    mask = torch.zeros(n, n, dtype=torch.bool, device=q.device)
    mask[relation.v, relation.u] = True
    qh, kh, vh = (t.transpose(0, 1)[None] for t in (q, k, v))
    return lambda: torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)


def syncs_stage(device, rows: Rows, out: Path):
    import syncs

    for system, setup in syncs.SETUPS.items():
        rows.attempt({"system": system}, lambda s=system, setup=setup: syncs.measure(str(device), 2, {s: setup})[0])


if __name__ == "__main__":
    sys.path.insert(0, str(BENCHMARKS))
    sys.exit(main())
