"""Decoding's Multi30k settings: the 1000 test_2016_flickr sentences in translate's batches, by a
random model of the CPU recipe's size whose outputs are forced to their references' lengths, or by
a trained run's model; the cost of one step at several row counts and a line fitted to it; and
greedy decoding at several batch budgets.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from benchmarks.decoders import (
    DENSE,
    GRAPH,
    clocked_methods,
    decode_batches,
    dense_stepper,
    fastest_split,
    graph_stepper,
    rows_of,
    same_outputs,
    time_methods,
)
from benchmarks.harness import best_of, interleaved, reported
from benchmarks.recipe import MODEL_SIZES, RECIPE_MODEL
from graphformer import make_model
from graphformer.data.batching import decoding_batches
from graphformer.model.dense import to_torch_transformer
from graphformer.vocab import EOS, UNK, Vocab

BEAMS = (1, 5)
# The CPU recipe's model; random weights, so no dropout, and one table per side (the vocabularies
# below are per side).
MULTI30K_CONFIG = dict(MODEL_SIZES, max_len=RECIPE_MODEL["max_len"], dropout=0.0, tie="none")
# Vocabulary sizes of the recipe's data kept per side (Moses-tokenized Multi30k train, min count 2,
# --no-shared-vocab): the figures in docs/results.md were measured with them.
RECIPE_SRC_VOCAB, RECIPE_TGT_VOCAB = 6_194, 8_055


def random_length_forced_model(en: list[str], de: list[str]):
    """(model, source ids, per-sentence limits): a CPU-recipe-sized random model that never picks
    </s> before each sentence's limit, its German reference's length + 1."""
    from graphformer.data.multi30k import MosesPipeline

    src_words = [MosesPipeline("en").tokenize(x) for x in en]
    # The test sentences' own words, then unused ids up to the recipe's size (<unk> beyond it).
    words = Vocab.build(src_words)
    src = [[i if i < RECIPE_SRC_VOCAB else UNK for i in words.encode(s)] for s in src_words]
    torch.manual_seed(0)
    model = make_model(RECIPE_SRC_VOCAB, RECIPE_TGT_VOCAB, **MULTI30K_CONFIG).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = -1e4  # </s> only where search forces it (at the limit)
    return model, src, [len(MosesPipeline("de").tokenize(x)) + 1 for x in de]


def trained_model(run_dir: Path, en: list[str]):
    """(model, source ids, per-sentence limits) of a trained run: translate's limits, natural stops."""
    from graphformer.decoding import max_target_lengths
    from graphformer.running.loaded import LoadedRun

    run = LoadedRun(run_dir)
    tokenize, _ = run.pipelines()
    src = [run.src_vocab.encode(tokenize(x)) for x in en]
    positions = run.model.make_pool().source_positions  # a source's tokens and </s>, as a batch counts them
    limits = max_target_lengths(torch.tensor([positions(len(s)) for s in src]), run.model.cfg.max_len).tolist()
    return run.model.eval(), src, limits


def multi30k_inputs(mirror: Path, sentences: int, run_dir: Path | None = None):
    """(model, its dense peer, source ids, per-sentence limits) of the Multi30k settings: a trained
    run's model, or a random length-forced one."""
    from graphformer.data.multi30k import read_gz

    en = read_gz(mirror / "test_2016_flickr.en.gz")[:sentences]
    de = read_gz(mirror / "test_2016_flickr.de.gz")[:sentences]
    model, src, limits = trained_model(run_dir, en) if run_dir else random_length_forced_model(en, de)
    return model, to_torch_transformer(model).eval(), src, limits


STEP_COST_ROWS = (1, 16, 64, 128, 256)  # and all of the first batch's rows


@torch.inference_mode()
def step_seconds(make, chunk, device, prefix: int = 10, steps: int = 8) -> float:
    """Seconds of one greedy step over all of ``chunk``'s sentences, after ``prefix`` steps
    (attention then spans a translation's usual prefix); ``make(chunk, beam, max_steps)`` makes the
    stepper."""
    stepper, _ = make(chunk, 1, prefix + steps)
    tokens = torch.full((len(chunk),), UNK, device=device)
    for _ in range(prefix):
        stepper.step(tokens)
    tic = time.perf_counter()
    for _ in range(steps):
        stepper.step(tokens)
    return (time.perf_counter() - tic) / steps


def step_cost_setting(rounds: int, inputs) -> tuple[list[dict], dict]:
    """(rows, {method: (per_step, per_row)}): each decoder's greedy step timed at several row
    counts (the first translate batch's first sentences; every count and decoder once per round,
    the best round counts) and a line fitted to each."""
    model, dense, src, _ = inputs
    first = [src[i] for i in decoding_batches([len(s) for s in src])[0]]
    counts = sorted({n for n in STEP_COST_ROWS if n < len(first)} | {len(first)})
    makers = {GRAPH: graph_stepper(model, "auto"), DENSE: dense_stepper(model, dense)}
    device = next(model.parameters()).device
    runs = {
        (name, n): (lambda make=makers[name], chunk=first[:n]: step_seconds(make, chunk, device))
        for n in counts
        for name in makers
    }
    seconds = best_of(interleaved(runs, rounds, measure=reported))  # step_seconds leaves out its prefix
    rows = [
        {"setting": "multi30k step cost", "beam": 1, "method": name, "rows": n, "seconds_per_step": s}
        for (name, n), s in seconds.items()
    ]
    fits = {}
    for name in makers if len(counts) > 1 else ():  # a line needs two row counts (a batch of one sentence has one)
        fit = statistics.linear_regression(counts, [seconds[name, n] for n in counts])
        fits[name] = (fit.intercept, fit.slope)
        rows.append(
            {
                "setting": "multi30k step cost fit",
                "beam": 1,
                "method": name,
                "seconds_per_step": fit.intercept,
                "seconds_per_row": fit.slope,
            }
        )
    for n in counts:
        g, d = seconds[GRAPH, n], seconds[DENSE, n]
        print(f"multi30k greedy step at {n:4d} rows: graph {g * 1e3:7.2f} ms, dense {d * 1e3:7.2f} ms ({d / g:.2f}x)")
    for name, (per_step, per_row) in fits.items():
        print(f"  {name}: {per_step * 1e3:.2f} ms per step + {per_row * 1e6:.1f} us per row")
    return rows, fits


def predicted_searches(cost: tuple[float, float], batches: list[list[int]], lengths: list[int]) -> tuple[float, float]:
    """(graph, padded) greedy search seconds at ``cost`` = (per step, per row): a graph decoder
    steps each batch's live rows (output i, </s> included, is live for lengths[i] steps); a padded
    one steps every row of a batch until its longest output ends."""
    per_step, per_row = cost
    graph = padded = 0.0
    for idx in batches:
        ends = [lengths[i] for i in idx]
        longest = max(ends)
        graph += longest * per_step + per_row * sum(ends)
        padded += longest * (per_step + per_row * len(idx))
    return graph, padded


def multi30k_setting(rounds: int, inputs, step_cost: tuple[float, float] | None = None) -> list[dict]:
    """Greedy and beam rows of the graph decoder (the default backend only: the dgl one is timed
    in the fixed setting) and the dense peer. ``step_cost``: the dense peer's fitted (per step,
    per row) greedy step cost, for ``equal_cost_per_step_estimate``."""
    model, dense, src, limits = inputs
    batches = decoding_batches([len(s) for s in src])
    print(f"multi30k: {len(batches)} batches of {min(map(len, batches))}-{max(map(len, batches))} sentences")
    rows = []
    for beam in BEAMS:
        makers = {GRAPH: lambda: graph_stepper(model, "auto"), DENSE: lambda: dense_stepper(model, dense)}
        methods, clocks = clocked_methods(model, src, limits, beam, makers)
        check = same_outputs()
        seconds = time_methods(methods, rounds, check)
        lengths = [len(tokens) + 1 for tokens in check.tokens()]  # each output and its </s>
        split = fastest_split(clocks)
        cost = step_cost if beam == 1 else None
        figures = padding_figures(beam, split, batches, lengths, limits, cost)
        for row in rows_of("multi30k", beam, seconds, len(src), sum(lengths)):
            mine = split[row["method"]]
            rows.append(
                {
                    **row,
                    "setup_seconds": mine["setup"],
                    "search_seconds": mine["search"],
                    "search_vs_dense_kv_cache": split[DENSE]["search"] / mine["search"],
                    **figures,
                }
            )
    return rows


def padding_figures(beam: int, split: dict, batches, lengths, limits, step_cost=None) -> dict:
    """What a padded batch waits for (its longest output; outputs stopped only by their limit) and
    what the graph decoder could reach against the dense peer: at the dense peer's cost per row
    (``equal_cost_per_row_bound``), and with ``step_cost``, at its cost per step and per row."""
    longest = [max(lengths[i] for i in idx) for idx in batches]
    padded = sum(len(idx) * most for idx, most in zip(batches, longest))
    padding = padded / sum(lengths)  # the most dropping finished rows can gain at equal cost per row
    graph, peer = split[GRAPH], split[DENSE]
    # The total if the graph decoder's search cost the dense peer's per row, for the rows it steps:
    bound = (peer["setup"] + peer["search"]) / (graph["setup"] + peer["search"] / padding)
    print(
        f"multi30k beam {beam}: a padded batch steps {padding:.2f}x the rows a graph decoder steps; "
        f"setup (batching, encoder, memory) {graph['setup']:.2f} s graph, {peer['setup']:.2f} s "
        f"dense; search {peer['search'] / graph['search']:.2f}x; at equal cost per row the total "
        f"could reach {bound:.2f}x"
    )
    figures = {"padded_over_live_row_steps": padding, "equal_cost_per_row_bound": bound}
    if step_cost is not None:
        graph_pred, dense_pred = predicted_searches(step_cost, batches, lengths)
        # The fit gives the ratio of the two searches; the measured dense search sets the scale
        # (the fit's own times were taken at another moment of a noisy run).
        estimate = (peer["setup"] + peer["search"]) / (graph["setup"] + peer["search"] * graph_pred / dense_pred)
        figures.update(equal_cost_per_step_estimate=estimate, predicted_search_ratio=dense_pred / graph_pred)
        print(
            f"  with the dense peer's cost per step and per row, the graph search would be about "
            f"{dense_pred / graph_pred:.2f}x the dense one and the total {estimate:.2f}x"
        )
    return {
        **figures,
        "batch_sizes": [len(idx) for idx in batches],
        "longest_output_per_batch": longest,
        "mean_output_length": sum(lengths) / len(lengths),
        "outputs_at_their_limit": sum(length >= limit for length, limit in zip(lengths, limits)),
    }


def batch_budget_setting(rounds: int, inputs, budgets: list[int]) -> list[dict]:
    """Multi30k greedy decoding at several batch budgets: each decoder's best budget, since a
    padded decoder and one that drops finished rows do not gain alike from larger batches."""
    model, dense, src, limits = inputs
    steppers = {
        GRAPH: lambda: graph_stepper(model, "auto"),  # a fresh graph pool per run
        DENSE: lambda: dense_stepper(model, dense),
    }
    runs = {
        (method, tokens): (lambda make=make, t=tokens: decode_batches(model, src, limits, 1, make(), t))
        for tokens in budgets
        for method, make in steppers.items()
    }
    seconds = best_of(time_methods(runs, rounds, same_outputs()))
    rows = [
        {
            "setting": "multi30k batch budgets",
            "beam": 1,
            "method": method,
            "batch_tokens": tokens,
            "seconds": s,
            "sentences_per_s": len(src) / s,
        }
        for (method, tokens), s in seconds.items()
    ]
    best = {m: min((r for r in rows if r["method"] == m), key=lambda r: r["seconds"]) for m in steppers}
    graph, dense_best = best[GRAPH], best[DENSE]
    print(
        f"multi30k greedy, each decoder at its best batch budget: graph @{graph['batch_tokens']} "
        f"{dense_best['seconds'] / graph['seconds']:.2f}x dense @{dense_best['batch_tokens']}"
    )
    for r in rows:
        r["vs_best_dense"] = dense_best["seconds"] / r["seconds"]
        print(
            f"  {r['method']:26s} @{r['batch_tokens']:6d} {r['sentences_per_s']:8.1f} sentences/s "
            f"{r['vs_best_dense']:.2f}x the best dense"
        )
    return rows
