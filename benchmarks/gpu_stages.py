"""The GPU check's stages, each run in a process of its own (`benchmarks.gpu_check` starts them):
the imports, the gpu-marked tests, decoding, long-sequence attention and syncs per step (the
training stage: `benchmarks.gpu_training`). A stage's rows are rewritten to their file after each
one (`Rows`), so a stage that crashes or runs out of time keeps the finished ones.

graphformer is imported inside the stages: the imports stage reports, row by row, what fails to.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

from benchmarks.harness import ROOT, write_json

RUNTIME_PACKAGES = ["yaml", "tqdm", "networkx", "matplotlib", "sacrebleu", "sentencepiece", "sacremoses"]


class Rows:
    """A stage's rows, rewritten to their file after each one."""

    def __init__(self, path: Path, **facts):
        self.path, self.data = path, {**facts, "rows": []}
        write_json(self.path, self.data)

    def add(self, row: dict) -> dict:
        self.data["rows"].append(row)
        write_json(self.path, self.data)
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


def decoding_stage(device, rows: Rows, out: Path):
    import torch

    from benchmarks.decoders import FIXED_OUTPUT_TOKENS, dense_decode, fixed_model_and_sources, fixed_translate
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
        write_json(rows.path, rows.data)


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
    """The attention operator alone, forward and backward (forward only for flex on a CPU, which
    has no backward there): blocked, torch, flex and masked SDPA on window and BigBird patterns."""
    import torch

    from benchmarks.flex_attention import relation_of
    from graphformer.graphs.relation import Relation

    patterns = {"window": "window:128", "bigbird": "window:64+global:2+random:3"}
    lengths = [4096, 16384] if device.type == "cuda" else [256]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for spec in patterns.values():  # window, bigbird
        for L in lengths:
            cpu = relation_of(spec, L)
            relation = Relation.of_edges(cpu.u, cpu.v, cpu.num_keys, cpu.num_queries, device=device, verified=True)
            for method in ["blocked", "torch", "flex", "sdpa"]:
                row = {"pattern": spec, "L": L, "method": method, "dtype": str(dtype).split(".")[-1], "heads": 8}
                attention_row(rows, {**row, "dim": 64}, relation, device, dtype)
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
    write_json(rows.path, rows.data)


def attention_row(rows: Rows, row: dict, relation, device, dtype):
    """``row``'s method on ``relation``: milliseconds a call (of 3 after a warm-up) and peak
    memory, or why it is skipped."""
    import torch

    from benchmarks.peers import masked_sdpa
    from graphformer.attention import blocked, flex, torch_ops

    method, heads, dim = row["method"], row["heads"], row["dim"]
    backward = device.type == "cuda" or method != "flex"  # flex has no backward on a CPU
    row["pass"] = "forward+backward" if backward else "forward"
    if method == "flex" and flex.unavailable():
        return rows.add({**row, "skipped": flex.unavailable()})
    if method == "flex" and device.type == "cpu" and not flex.cpu_kernel_runs():
        return rows.add({**row, "skipped": "this CPU builds no FlexAttention kernel (torch >= 2.6, AVX2)"})
    attend = {"blocked": blocked.attend, "torch": torch_ops.attend, "flex": flex.attend}

    def measure():
        n = relation.num_queries
        q, k, v = (torch.randn(n, heads, dim, device=device, dtype=dtype, requires_grad=backward) for _ in range(3))
        call = masked_sdpa(relation, q, k, v) if method == "sdpa" else (lambda: attend[method](relation, q, k, v))

        def once():
            out = call()
            if backward:
                out.float().sum().backward()

        seconds, peak = timed(once, device, repeats=3)
        return {"ms": 1e3 * seconds / 3, "peak_memory_mib": peak / 2**20, "edges": relation.num_edges}

    return rows.attempt(row, measure)


def syncs_stage(device, rows: Rows, out: Path):
    from benchmarks import syncs

    for system, setup in syncs.SETUPS.items():
        rows.attempt({"system": system}, lambda s=system, setup=setup: syncs.measure(str(device), 2, {s: setup})[0])
