"""The cost of edges that carry information: training tokens/s of graphformer with each kind of
edge information against none, per backend (docs/howto/edge-types.md says what each spec adds).

Each row trains the configuration and batches of `benchmarks.training_throughput` (``--task copy``
or ``multi30k``) with one edge SPEC on all three attention sub-layers, encoder, decoder and cross
(``--enc-edges SPEC --dec-edges SPEC --cross-edges SPEC``), on one backend; a spec that uses
``alibi`` trains with ``--positions none``, as ALiBi replaces positional encodings. Every
(spec, backend) pair is one run of the harness's interleaved loop, so a busy machine slows each
round's runs alike, and each row's ratio is to the ``none`` row of its own backend::

    ratio_to_none = tokens_per_s(SPEC, backend) / tokens_per_s(none, backend)

The backends are those that train here (flex does not on a CPU; dgl where it is installed) and can
add the spec's biases (`graphformer.catalog.BACKENDS`' capabilities).

    python -m benchmarks.edge_cost [--task copy] [--steps 8] [--rounds 2] [--edges none bias=relative:16 ...]
"""

from __future__ import annotations

import argparse
from functools import partial

import torch

from benchmarks.harness import command, interleaved, reported, write_result
from benchmarks.training_throughput import (
    CONFIGS,
    add_batch_options,
    graph_loss,
    rerun_argv,
    train_seconds,
    training_batches,
    trains_here,
)
from graphformer import make_model
from graphformer.attention import BACKENDS
from graphformer.choices import SUBLAYERS
from graphformer.errors import ConfigError, UserError
from graphformer.model.edge_spec import NONE, field_of, parse_edges
from graphformer.training.config import check_backend_serves
from graphformer.training.schedule import make_optimizer

# One spec of each use on types derived from positions: a learned bias per clipped offset, T5's
# log buckets, ALiBi's fixed slopes, Shaw's key and value vectors.
DEFAULT_EDGES = (NONE, "bias=relative:16", "bias=t5:32,128", "alibi", "shaw=relative:16")


def edge_spec(text: str) -> str:
    """An argparse type: a SPEC (``--enc-edges``' syntax) that every sub-layer of the benchmark's
    models can take; types that come with each sample are refused (its tasks have no sample graphs)."""
    spec = text.replace(" ", "")
    try:
        terms = [t for sublayer in SUBLAYERS for t in parse_edges(spec, sublayer)]
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if any(t.per_sample for t in terms):
        raise argparse.ArgumentTypeError(
            f"{spec!r} reads types given with each sample, which copy and multi30k have none of; "
            "give types derived from positions (relative:K, t5:B,D, distance)"
        )
    return spec


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_batch_options(parser, steps=8)
    parser.add_argument(
        "--edges",
        nargs="+",
        type=edge_spec,
        default=list(DEFAULT_EDGES),
        metavar="SPEC",
        help="the edge specs to measure, each on every sub-layer; none is always measured, first: "
        "the ratios are to it (default: %(default)s)",
    )
    return parser.parse_args()


def model_options(spec: str) -> dict:
    """The `ModelConfig` fields of one spec's model: the spec on every sub-layer, and no positional
    encoding where it uses ALiBi (whose distances are the model's only sense of order)."""
    alibi = any(term.use == "alibi" for term in parse_edges(spec, "enc"))
    return {**{field_of(sublayer): spec for sublayer in SUBLAYERS}, **({"positions": "none"} if alibi else {})}


def serving_backends(model) -> list[str]:
    """The backends that train here (not auto, which picks one of them) and add ``model``'s biases."""
    names = []
    for name in BACKENDS:
        if name == "auto" or not trains_here(name):
            continue
        try:
            check_backend_serves(model.cfg, name)
        except ConfigError:
            continue
        names.append(name)
    return names


def train_on(backend: str, model, pool, optimizer, batches, steps: int) -> float:
    """Seconds of ``steps`` training steps of ``model`` with attention ``backend`` (`train_seconds`)."""
    src_b, tgt_b = batches
    model.attention_backend = backend
    return train_seconds(lambda i: graph_loss(model, pool, src_b[i], tgt_b[i]), optimizer, steps)


def edge_seconds(config: dict, vocab: int, batches, specs: list[str], steps: int, rounds: int):
    """({(spec, backend): [seconds of each round]}, {spec: its model}): one model per spec, each
    starting from seed 0, trained on every backend that serves it, all pairs in turn each round."""
    models, runs = {}, {}
    for spec in specs:
        torch.manual_seed(0)  # the parameters every spec's model has start alike
        model = models[spec] = make_model(vocab, **config, **model_options(spec))
        # One optimizer per model, whichever backend steps it: an Adam step costs the same.
        optimizer = make_optimizer(model.parameters(), config["d_model"], 400, 1.0)
        state = (model, model.make_pool(), optimizer, batches, steps)
        runs.update({(spec, backend): partial(train_on, backend, *state) for backend in serving_backends(model)})
    # Each run times its steps only. The first round also builds each pool's graphs of the batches
    # (whichever backend meets them first): a figure is its best round, so rounds >= 2 for one to trust.
    return interleaved(runs, rounds, measure=reported, alternate=True), models


def cost_rows(seconds: dict, models: dict, tokens: int) -> list[dict]:
    """One row per (spec, backend): its best round, target tokens/s, ratio to the none row of the
    same backend, and what its model adds (positions, parameters)."""
    rows = []
    for (spec, backend), times in seconds.items():
        model = models[spec]
        rows.append(
            {
                "edges": spec,
                "backend": backend,
                "positions": model.cfg.positions,
                "parameters": sum(p.numel() for p in model.parameters()),
                "seconds": min(times),
                "tokens_per_s": tokens / min(times),
            }
        )
    none = {r["backend"]: r["tokens_per_s"] for r in rows if r["edges"] == NONE}
    for r in rows:
        r["ratio_to_none"] = r["tokens_per_s"] / none[r["backend"]]
    return rows


def main():
    args = parse_args()
    specs = list(dict.fromkeys([NONE, *args.edges]))  # none first, each spec once
    config = CONFIGS[args.task]
    vocab, src_b, tgt_b, sizing = training_batches(args)
    seconds, models = edge_seconds(config, vocab, (src_b, tgt_b), specs, args.steps, args.rounds)
    tokens = sum(len(t) + 1 for b in tgt_b for t in b)
    rows = cost_rows(seconds, models, tokens)
    for r in sorted(rows, key=lambda r: r["backend"]):
        print(
            f"{r['backend']:8s} {r['edges']:18s} {r['tokens_per_s']:9.0f} target tokens/s  "
            f"x{r['ratio_to_none']:.2f} of none"
        )
    result = {
        "config": {**config, **sizing, "task": args.task},
        "edges_on": list(SUBLAYERS),
        "steps": args.steps,
        "rounds": args.rounds,
        "target_tokens": tokens,
        "rows": rows,
    }
    name = "edge_cost.json" if args.task == "copy" else f"edge_cost_{args.task}.json"
    write_result(args.out, name, command("edge_cost", rerun_argv(args)), result)


if __name__ == "__main__":
    main()
