"""Decoding speed: graphformer's incremental graph decoding against recomputing the prefix, and
against a dense peer with a key/value cache (`benchmarks.peers.DenseCacheStepper`), greedy and
beam 5, every method asserted to decode the same tokens.

* fixed: a copy-configuration model decodes 32 sentences of 20 tokens to exactly 50 target tokens
  (`benchmarks.decoders.fixed_model_and_sources`), graph incremental with the default backend and
  the edge-wise one, graph recompute (timed once: it is slow), the graph decoder with an inline step
  (`benchmarks.inline_step`, a bound) and the dense peer; rows count the Python calls per step.
* multi30k (with the raw files): the 1000 test_2016_flickr sentences in translate's batches
  (`benchmarks.decoding_multi30k`), by a random CPU-recipe-sized model whose outputs are forced
  to their references' lengths, or with ``--multi30k-run`` a trained run's; the cost of one step
  at several row counts; with ``--batch-budgets``, greedy decoding at several batch budgets.

What the figures say, and how they are measured: ``docs/results.md``, "Decoding".

    python -m benchmarks.decoding [--rounds 5] [--multi30k-rounds 2] [--mirror DIR] [--multi30k-run RUN_DIR]
                                  [--batch-budgets N,N,...] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.decoders import (
    DENSE,
    FIXED_OUTPUT_TOKENS,
    GRAPH,
    clocked_methods,
    dense_stepper,
    fastest_split,
    fixed_model_and_sources,
    fixed_translate,
    graph_stepper,
    python_calls,
    rows_of,
    same_outputs,
    time_methods,
)
from benchmarks.decoding_multi30k import (
    BEAMS,
    batch_budget_setting,
    multi30k_inputs,
    multi30k_setting,
    step_cost_setting,
)
from benchmarks.harness import command, wall_seconds, write_result
from benchmarks.inline_step import InlineStepGraphStepper
from graphformer.attention import unavailable
from graphformer.cli import at_least_one
from graphformer.data.batching import DECODE_BATCH_TOKENS
from graphformer.model.dense import to_torch_transformer

INLINE_BOUND = "graph, inline step (bound)"  # InlineStepGraphStepper's method name
EDGEWISE = "torch" if unavailable("dgl") else "dgl"  # the edge-wise kernels: DGL's where it is installed
DEFAULT_MIRROR = "../shared/data/multi30k"


def fixed_setting(rounds: int) -> list[dict]:
    """The fixed setting's rows, greedy and beam 5."""
    model, src = fixed_model_and_sources()
    dense = to_torch_transformer(model).eval()
    limits = [FIXED_OUTPUT_TOKENS] * len(src)

    def recompute(backend):
        def run(beam):
            model.attention_backend = backend
            return fixed_translate(model, src, beam, incremental=False)

        return run

    rows = []
    for beam in BEAMS:
        makers = {f"graph incremental ({b})": (lambda b=b: graph_stepper(model, b)) for b in (EDGEWISE, "auto")}
        makers[INLINE_BOUND] = lambda: graph_stepper(model, "auto", InlineStepGraphStepper)
        makers[DENSE] = lambda: dense_stepper(model, dense)
        methods, clocks = clocked_methods(model, src, limits, beam, makers)
        check = same_outputs()
        seconds = time_methods(methods, rounds, check)
        for b in (EDGEWISE, "auto"):  # the slow reference: one timed run
            name = f"graph recompute ({b})"
            seconds[name] = [wall_seconds(lambda: check(name, recompute(b)(beam)))]  # noqa: B023
        split = fastest_split(clocks)
        calls = {name: python_calls(makers[name](), src, limits, beam) for name in makers}
        for row in rows_of("fixed", beam, seconds, len(src), len(src) * FIXED_OUTPUT_TOKENS):
            if row["method"] in makers:
                row.update(
                    setup_seconds=split[row["method"]]["setup"],
                    search_seconds=split[row["method"]]["search"],
                    python_calls_setup=calls[row["method"]]["setup"],
                    python_calls_per_step=calls[row["method"]]["per_step"],
                )
            rows.append(row)
        graph, bound, peer = (split[name] for name in (GRAPH, INLINE_BOUND, DENSE))
        print(
            f"fixed beam {beam}: setup {graph['setup'] * 1e3:.1f} ms graph, {peer['setup'] * 1e3:.1f} ms dense; "
            f"search {graph['search'] * 1e3:.1f} ms, {peer['search'] * 1e3:.1f} ms (the graph decoder with an inline "
            f"step: {bound['search'] * 1e3:.1f} ms); Python calls per step "
            f"{calls[GRAPH]['per_step']:.0f} graph, {calls[DENSE]['per_step']:.0f} dense"
        )
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=at_least_one, default=5, help="timed rounds per method (the best counts)")
    parser.add_argument("--multi30k-rounds", type=at_least_one, default=2, help="timed rounds in the multi30k setting")
    parser.add_argument(
        "--mirror",
        default=DEFAULT_MIRROR,
        help="Multi30k raw files (without them, and unless "
        "--mirror or --multi30k-run is given, the multi30k setting is skipped)",
    )
    parser.add_argument("--multi30k-sentences", type=at_least_one, default=1000)
    parser.add_argument(
        "--multi30k-run",
        type=Path,
        metavar="RUN_DIR",
        help="decode with this trained Multi30k run's best model (natural stops) instead of a "
        "random, length-forced one",
    )
    parser.add_argument(
        "--batch-budgets",
        type=lambda text: [int(x) for x in text.split(",")],
        metavar="N,N,...",
        help="also time Multi30k greedy decoding at these source-token budgets per batch, so each "
        "decoder can be compared at its best (e.g. 1000,2000,4000,8000)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    args.have_multi30k = (Path(args.mirror) / "test_2016_flickr.en.gz").is_file()
    if not args.have_multi30k and (args.multi30k_run or args.mirror != DEFAULT_MIRROR):  # asked for, not there
        parser.error(
            f"no Multi30k files in {args.mirror} (test_2016_flickr.en.gz); give --mirror the folder that holds them"
        )
    if args.multi30k_run:  # before the fixed setting's minutes, not after
        from graphformer.errors import UserError
        from graphformer.training.run_dir import find_checkpoint

        try:
            find_checkpoint(args.multi30k_run, "best")
        except UserError as err:
            parser.error(f"--multi30k-run: {err}")
    return args


def multi30k_rows(args) -> list[dict]:
    """The Multi30k settings' rows (the step cost's fit feeds the main setting's estimate)."""
    inputs = multi30k_inputs(Path(args.mirror), args.multi30k_sentences, args.multi30k_run)
    cost_rows, fits = step_cost_setting(args.rounds, inputs)
    rows = multi30k_setting(args.multi30k_rounds, inputs, fits.get(DENSE)) + cost_rows
    if args.batch_budgets:
        rows += batch_budget_setting(args.multi30k_rounds, inputs, args.batch_budgets)
    return rows


def main():
    args = parse_args()
    rows = fixed_setting(args.rounds)
    if args.have_multi30k:
        rows += multi30k_rows(args)
    else:
        print(f"no Multi30k files in {args.mirror}: skipping the multi30k setting (pass --mirror DIR)")
    argv = ["--rounds", args.rounds, "--multi30k-rounds", args.multi30k_rounds, "--mirror", args.mirror]
    argv += ["--multi30k-sentences", args.multi30k_sentences]
    argv += ["--multi30k-run", args.multi30k_run] if args.multi30k_run else []
    argv += ["--batch-budgets", ",".join(map(str, args.batch_budgets))] if args.batch_budgets else []
    multi30k = (
        "the trained run's best model, natural stops"
        if args.multi30k_run
        else "CPU-recipe-sized random model, each output as long as its German reference (+</s>)"
    )
    settings = {
        "fixed": "copy model (2 layers, d_model 128), 32 sentences of 20 tokens, 50 target tokens each, one batch",
        "multi30k": f"{args.multi30k_sentences} test_2016_flickr sentences, batches as translate makes them "
        f"({DECODE_BATCH_TOKENS} source tokens, by length), {multi30k}",
    }
    write_result(
        args.out, "decoding.json", command("decoding", list(map(str, argv))), {"settings": settings, "rows": rows}
    )


if __name__ == "__main__":
    main()
