"""The decoders the decoding benchmarks time, and how they run them: steppers for the graph
decoder and the dense peer, `translate`'s batches opened up so that setup and search are clocked
apart, the check that every method decodes the same tokens, and a row per method.

The fixed setting (also the GPU check's and the tile kernels' decoding): a model of the copy
configuration that never picks </s> before the length limit, 20-token sources, outputs of exactly
``FIXED_OUTPUT_TOKENS`` tokens.
"""

from __future__ import annotations

import cProfile
import pstats
import random
import statistics
import time

import torch

from benchmarks.harness import interleaved
from benchmarks.peers import DenseCacheStepper
from graphformer import make_model
from graphformer.data.batching import DECODE_BATCH_TOKENS, decoding_batches
from graphformer.decoding import DEFAULT_ALPHA, IncrementalStepper, beam_search, greedy_search, translate_ids
from graphformer.graphs import make_batch
from graphformer.vocab import EOS

GRAPH, DENSE = "graph incremental (auto)", "dense KV cache"  # the graph decoder's and the dense peer's method names
FIXED_SOURCE_TOKENS, FIXED_OUTPUT_TOKENS = 20, 50  # the fixed setting: every output 49 tokens + </s>


def search(stepper, limits, beam, drop_finished):
    if beam == 1:
        return greedy_search(stepper, limits, drop_finished=drop_finished)
    return beam_search(stepper, limits, beam, DEFAULT_ALPHA, drop_finished=drop_finished)


@torch.inference_mode()  # as translate_ids
def decode_batches(model, src, limits, beam, stepper_of, batch_tokens=DECODE_BATCH_TOKENS, clock=None):
    """Decode every batch (`decoding_batches`, as ``translate`` makes them, ``batch_tokens``
    source tokens each); outputs in input order. `translate_ids`' own loop, opened up: each method
    brings its stepper, each sentence its length limit, and the clock splits setup from search:
    ``stepper_of(chunk, beam, max_steps) -> (stepper, drop_finished)``.
    ``clock``, if given, adds the seconds spent making steppers (batching, the encoder, the
    memory's keys and values) to ``clock['setup']`` and searching to ``clock['search']``."""
    out = [None] * len(src)
    device = next(model.parameters()).device
    clock = {"setup": 0.0, "search": 0.0} if clock is None else clock
    for idx in decoding_batches([len(s) for s in src], batch_tokens):
        chunk = [src[i] for i in idx]
        lim = torch.tensor([limits[i] for i in idx], device=device)
        tic = time.perf_counter()
        stepper, drop = stepper_of(chunk, beam, int(lim.max()))
        made = time.perf_counter()
        for i, h in zip(idx, search(stepper, lim, beam, drop)):
            out[i] = h
        clock["setup"] += made - tic
        clock["search"] += time.perf_counter() - made
    return out


def graph_stepper(model, backend, stepper=IncrementalStepper):
    pool = model.make_pool()

    def make(chunk, beam, max_steps):
        model.attention_backend = backend
        batch = make_batch(pool, chunk).to(next(model.parameters()).device)
        return stepper(model, batch, beam, max_steps, pool), True

    return make


def dense_stepper(model, dense):
    return lambda chunk, beam, max_steps: (DenseCacheStepper(model, dense, chunk, beam, max_steps), False)


def dense_decode(model, dense, src, beam, limit):
    """The dense peer on ``src`` in batches by length, every output at most ``limit`` tokens."""
    return decode_batches(model, src, [limit] * len(src), beam, dense_stepper(model, dense))


def time_methods(methods: dict, rounds: int, check) -> dict:
    """Seconds of each method in each round (`benchmarks.harness.interleaved`) after an untimed
    warm-up run of each (graph pool, allocator), which ``check(name, hyps)`` sees."""
    for name, run in methods.items():
        check(name, run())
    return interleaved(methods, rounds)


def paired_ratios(seconds: dict, name: str, peer: str = DENSE) -> dict:
    """The peer's time over the method's, round by round: the median and the range say how far
    one ratio moves on this machine (a best-of ratio hides that)."""
    ratios = sorted(p / s for p, s in zip(seconds[peer], seconds[name]))
    return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1], "rounds": len(ratios)}


def same_outputs():
    """``check(name, hyps)``: every method must decode the tokens the first one did;
    ``check.tokens()`` gives them."""
    first = {}

    def check(name, hyps):
        tokens = [h.tokens for h in hyps]
        first.setdefault("tokens", tokens)
        assert tokens == first["tokens"], f"{name} decoded different tokens"

    check.tokens = lambda: first["tokens"]
    return check


def rows_of(setting, beam, seconds: dict, sentences: int, tokens: int):
    """One row per method from its seconds per round (its best counts; methods timed in the same
    rounds as the dense peer also get the paired ratios' spread)."""
    rows, dense = [], seconds[DENSE]
    for name, times in seconds.items():
        s = min(times)
        row = {
            "setting": setting,
            "beam": beam,
            "method": name,
            "seconds": s,
            "sentences_per_s": sentences / s,
            "tokens_per_s": tokens / s,
            "vs_dense_kv_cache": min(dense) / s,
        }
        if name != DENSE and len(times) == len(dense) > 1:
            row["vs_dense_kv_cache_paired"] = paired_ratios(seconds, name)
        backend = name[name.find("(") :]
        if name.startswith("graph incremental") and f"graph recompute {backend}" in seconds:
            row["vs_recompute"] = min(seconds[f"graph recompute {backend}"]) / s
        rows.append(row)
        spread = row.get("vs_dense_kv_cache_paired")
        print(
            f"{setting:8s} beam {beam} {name:26s} {row['sentences_per_s']:8.1f} sentences/s "
            f"{row['tokens_per_s']:9.0f} tokens/s  {row['vs_dense_kv_cache']:.2f}x dense"
            + (
                f" (paired rounds: median {spread['median']:.2f}x, {spread['min']:.2f}-{spread['max']:.2f}x)"
                if spread
                else ""
            )
        )
    return rows


def clocked_methods(model, src, limits, beam, makers: dict):
    """({name: run}, {name: [clock per run]}): each run decodes ``src`` with a fresh stepper
    maker and records its setup and search seconds (see `decode_batches`)."""
    clocks = {name: [] for name in makers}

    def method(name):
        def run():
            clocks[name].append({"setup": 0.0, "search": 0.0})
            return decode_batches(model, src, limits, beam, makers[name](), clock=clocks[name][-1])

        return run

    return {name: method(name) for name in makers}, clocks


def fastest_split(clocks: dict) -> dict:
    """Each method's setup and search seconds in its fastest timed run (the first run of each,
    `time_methods`' warm-up, is not timed, so its split is left out too)."""
    return {name: min(runs[1:], key=lambda c: c["setup"] + c["search"]) for name, runs in clocks.items()}


@torch.inference_mode()
def python_calls(make, src, limits, beam) -> dict:
    """Python function calls (as cProfile counts them: a machine-independent measure of
    interpreter overhead) to make the stepper of one batch, and per step of its search."""
    lim = torch.tensor(limits)
    profiler = cProfile.Profile()
    profiler.enable()
    stepper, drop = make(src, beam, int(lim.max()))
    profiler.disable()
    setup = pstats.Stats(profiler).total_calls
    steps = []
    original = stepper.step
    stepper.step = lambda tokens: steps.append(1) or original(tokens)  # counts the steps search takes
    profiler = cProfile.Profile()
    profiler.enable()
    search(stepper, lim, beam, drop)
    profiler.disable()
    return {"setup": setup, "per_step": (pstats.Stats(profiler).total_calls - 2 * len(steps)) / len(steps)}


FIXED_SOURCE_TOKENS, FIXED_OUTPUT_TOKENS = 20, 50  # the fixed setting: every output 49 tokens + </s>


def fixed_model_and_sources(sentences: int = 32, device: str | torch.device = "cpu"):
    """The fixed setting (also the GPU check's and the tile kernels' decoding): a model of the copy
    configuration (seed 0) that never picks </s> before the length limit, and ``sentences``
    random sources of ``FIXED_SOURCE_TOKENS`` tokens."""
    torch.manual_seed(0)
    model = make_model(30, layers=2, d_model=128, heads=4, d_ff=256, dropout=0.0).to(device).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = -1e4  # every hypothesis runs to the length limit
    rng = random.Random(0)
    return model, [[rng.randrange(4, 30) for _ in range(FIXED_SOURCE_TOKENS)] for _ in range(sentences)]


def fixed_translate(model, src, beam: int, incremental: bool = True):
    """`translate_ids` on the fixed setting: one batch, every output ``FIXED_OUTPUT_TOKENS`` long."""
    return translate_ids(
        model,
        src,
        beam=beam,
        extra_len=FIXED_OUTPUT_TOKENS - FIXED_SOURCE_TOKENS - 1,
        incremental=incremental,
        batch_tokens=sum(len(s) + 1 for s in src),
    )
