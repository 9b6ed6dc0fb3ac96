"""The benchmark scripts run end to end at their smallest sizes (their figures are measured by
`make bench`; here that they produce them, refuse what they cannot measure, and that the decoding
benchmark's predictions count what each decoder steps)."""

import importlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(name: str, argv: list[str], timeout: int):
    """``python -m benchmarks.NAME ARGV`` from the repository root, as `make bench` runs it."""
    command = [sys.executable, "-m", f"benchmarks.{name}", *argv]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_sparse_attention_measures_every_method_and_leaves_the_docs_figure_alone(tmp_path):
    figure = ROOT / "docs" / "figures" / "sparse_attention.png"
    before = figure.read_bytes()
    proc = run_benchmark("sparse_attention", ["--lengths", "32", "--out", str(tmp_path)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "sparse_attention.json").read_text())["rows"]
    assert len(rows) == 6 and not [r for r in rows if "error" in r], rows
    assert {r["edges_per_head"] for r in rows} == {32 * 32}  # windows of 64 and 128 cover 32 tokens whole
    assert (tmp_path / "sparse_attention.png").stat().st_size > 1000 and figure.read_bytes() == before


@pytest.mark.parametrize(
    "name, argv, message",
    [
        ("sparse_attention", ["--lengths", "1"], "--lengths must be at least 2"),
        ("decoding", ["--rounds", "0"], "--rounds: must be at least 1"),
        ("decoding", ["--mirror", "/nonexistent"], "no Multi30k files in /nonexistent"),
        ("training_throughput", ["--steps", "0"], "--steps: must be at least 1"),
        ("training_throughput", ["--precision", "float16"], "'float16': give float32, bfloat16 or float32,bfloat16"),
        ("edge_cost", ["--edges", "none", "bias=relative"], "relative takes 1 integer argument"),
        ("edge_cost", ["--edges", "bias=role"], "reads types given with each sample"),
        ("precision", ["--run", "/nonexistent"], "--run: run directory /nonexistent does not exist"),
        ("threads", ["--steps", "0"], "--steps: must be at least 1"),
        ("threads", ["--steps", "2", "--skip", "2"], "--skip 2: give 0 to 1"),
    ],
)
def test_benchmarks_refuse_what_they_cannot_measure(tmp_path, name, argv, message):
    proc = run_benchmark(name, [*argv, "--out", str(tmp_path)], timeout=300)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_the_edge_cost_benchmark_rates_each_spec_against_none_on_each_backend(tmp_path):
    from graphformer.attention import dgl_ops

    argv = ["--steps", "1", "--rounds", "1", "--batch-size", "2", "--edges", "alibi", "bias=relative:2", "none"]
    proc = run_benchmark("edge_cost", [*argv, "--out", str(tmp_path)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "edge_cost.json").read_text())
    assert result["command"] == "python -m benchmarks.edge_cost --task copy " + " ".join(argv)
    rows = result["rows"]
    backends = {"torch", "padded", "blocked"} | (set() if dgl_ops.missing() else {"dgl"})  # flex trains on CUDA only
    assert list(dict.fromkeys(r["edges"] for r in rows)) == ["none", "alibi", "bias=relative:2"]  # none first, once
    assert sorted((r["edges"], r["backend"]) for r in rows) == sorted(
        (spec, b) for spec in ("none", "alibi", "bias=relative:2") for b in backends
    )
    none = {r["backend"]: r for r in rows if r["edges"] == "none"}
    for row in rows:
        assert row["tokens_per_s"] == result["target_tokens"] / row["seconds"]
        assert row["ratio_to_none"] == row["tokens_per_s"] / none[row["backend"]]["tokens_per_s"]
        assert row["positions"] == ("none" if row["edges"] == "alibi" else "sinusoidal")
        # A bias per head (8) and type (2 x 2 + 1 offsets) on each of the 3 sub-layers; ALiBi learns nothing.
        added = 3 * 8 * 5 if row["edges"] == "bias=relative:2" else 0
        assert row["parameters"] == none[row["backend"]]["parameters"] + added
    assert result["edges_on"] == ["enc", "dec", "cross"] and result["config"]["task"] == "copy"


def benchmark(name: str):
    """A module of the benchmarks package, to call its parts."""
    return importlib.import_module(f"benchmarks.{name}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_threads_benchmark_competes_only_while_it_measures():
    threads = benchmark("threads")
    with threads.competing(2, "busy") as pids:
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)  # stopped and reaped
    with threads.competing(2, "idle") as pids:
        assert pids == []


@pytest.mark.slow
def test_the_threads_benchmark_writes_a_rate_per_condition(tmp_path):
    argv = ["--threads", "1", "2", "--waits", "passive", "--steps", "3", "--skip", "1", "--rounds", "1"]
    proc = run_benchmark("threads", [*argv, "--busy", "1", "--out", str(tmp_path)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "threads.json").read_text())
    rows = result["rows"]
    assert [(r["threads"], r["wait"], r["load"]) for r in rows] == [
        ("1", "default", "idle"),
        ("1", "default", "busy"),
        ("2", "passive", "idle"),
        ("2", "passive", "busy"),
    ]
    for row in rows:
        (run,) = row["runs"]
        assert run["steps"] == 2 and run["threads_used"] == int(row["threads"])  # 3 steps, the first left out
        assert 0 < row["tokens_per_s"] == run["tokens_per_s"] < float("inf")
    assert result["command"] == "python -m benchmarks.threads " + " ".join(
        [*argv, "--busy", "1", "--out", str(tmp_path)]
    )
    assert result["versions"]["python"] == platform.python_version()


def test_predicted_searches_pay_per_live_row_and_per_step_until_the_longest_output():
    decoding = benchmark("decoding_multi30k")
    batches, lengths = [[0, 1, 2], [3]], [2, 5, 3, 4]
    # Per row only: the graph decoder steps 2 + 5 + 3 + 4 live rows, a padded one 3 x 5 + 1 x 4.
    assert decoding.predicted_searches((0.0, 1.0), batches, lengths) == (14.0, 19.0)
    # Per step only: both step each batch until its longest output ends, 5 + 4 steps.
    assert decoding.predicted_searches((1.0, 0.0), batches, lengths) == (9.0, 9.0)


@pytest.mark.parametrize("beam", [1, 3])
def test_the_inline_step_bound_computes_what_the_graph_step_computes(beam):
    """The fixed setting's bound (the graph decoder with its step written inline) is only a bound
    if it computes the same thing: fed the same tokens, through reorders that move and drop rows,
    it gives the graph stepper's log-probabilities at every step."""
    import torch

    from graphformer.decoding import IncrementalStepper
    from graphformer.graphs import make_batch
    from graphformer.vocab import SPECIALS

    model, src = benchmark("decoders").fixed_model_and_sources(sentences=4)
    inline_step = benchmark("inline_step")
    pool = model.make_pool()
    batch = make_batch(pool, src)
    steppers = [cls(model, batch, beam, 8, pool) for cls in (IncrementalStepper, inline_step.InlineStepGraphStepper)]
    generator = torch.Generator().manual_seed(0)
    rows = len(src) * beam
    with torch.inference_mode():
        for t in range(8):
            tokens = torch.randint(len(SPECIALS), model.cfg.tgt_vocab, (rows,), generator=generator)  # words
            graph, inline = (stepper.step(tokens) for stepper in steppers)
            torch.testing.assert_close(inline, graph, rtol=1e-4, atol=1e-5)
            if t in (2, 5):  # each hypothesis continues another of its sentence's; then the last sentence leaves
                parents = torch.arange(rows).view(-1, beam).flip(1).flatten() if t == 2 else torch.arange(rows - beam)
                rows = len(parents)
                for stepper in steppers:
                    stepper.reorder(parents)
    with pytest.raises(ValueError, match="sources of one length"):
        inline_step.InlineStepGraphStepper(model, make_batch(pool, [[5, 6], [5, 6, 7]]), 1, 8, pool)


@pytest.mark.slow
def test_the_training_benchmark_times_each_system_in_each_precision(tmp_path):
    argv = ["--steps", "1", "--rounds", "1", "--batch-size", "2", "--precision", "bfloat16,float32"]
    proc = run_benchmark("training_throughput", [*argv, "--out", str(tmp_path)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "training_throughput.json").read_text())
    assert result["command"].endswith("--precision float32,bfloat16")  # put in order: float32 first
    rows = {(r["system"], r["precision"]): r for r in result["rows"]}
    systems = {system for system, _ in rows}
    assert "dense nn.Transformer" in systems and "graph (padded)" in systems
    assert set(rows) == {(system, p) for system in systems for p in ("float32", "bfloat16")}
    for (system, precision), row in rows.items():
        assert row["tokens_per_s"] == result["target_tokens"] / row["seconds"]
        assert row["ratio_to_dense"] == row["tokens_per_s"] / rows["dense nn.Transformer", precision]["tokens_per_s"]
        if precision == "bfloat16":
            assert row["ratio_to_float32"] == row["tokens_per_s"] / rows[system, "float32"]["tokens_per_s"]
        else:
            assert "ratio_to_float32" not in row
    assert set(result["matmul_gflops"]) == {"float32", "bfloat16"} and result["sgemm_gflops"] > 0
