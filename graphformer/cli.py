"""The ``graphformer`` command: train, evaluate and translate.

    graphformer train --task copy --out runs/copy
    graphformer evaluate runs/copy --split test --json
    echo "h e l l o" | graphformer translate runs/copy

Errors a user can fix are printed as one line (``graphformer: error: ...``) with exit status 2;
set GRAPHFORMER_DEBUG=1 to see the traceback instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from graphformer.attention import BACKENDS, DEFAULT_BACKEND
from graphformer.errors import UserError


def _train_parser(sub):
    p = sub.add_parser("train", help="train a model", description="Train a graph Transformer and write a run directory.",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory for checkpoints, logs and vocabulary")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    data = p.add_argument_group("data")
    data.add_argument("--task", default="copy",
                      help="copy | sort (generated), parallel (your files in --data-dir), multi30k (English-German)")
    data.add_argument("--data-dir", help="parallel: train/valid/test.{src,tgt} files; copy/sort: where to generate them "
                      "(default RUN_DIR/data); multi30k: a local mirror of the raw .gz files instead of downloading")
    data.add_argument("--train-limit", type=int, help="use only the first N training pairs")
    data.add_argument("--min-count", type=int, default=1, help="drop tokens seen fewer times in training data")
    data.add_argument("--separate-vocab", action="store_true", help="one vocabulary per side instead of a shared one")
    model = p.add_argument_group("model")
    model.add_argument("--model", choices=("transformer", "universal"), default="transformer",
                       help="universal: one shared layer per side, repeated with adaptive computation time")
    model.add_argument("--layers", type=int, default=2, help="layers per side (transformer)")
    model.add_argument("--d-model", type=int, default=128)
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--d-ff", type=int, default=512)
    model.add_argument("--dropout", type=float, default=0.1)
    model.add_argument("--norm", choices=("pre", "post"), default="pre", help="layer-norm placement")
    model.add_argument("--positions", choices=("sinusoidal", "learned"), default="sinusoidal")
    model.add_argument("--max-len", type=int, default=256, help="longest sequence the positional table holds")
    model.add_argument("--tie", choices=("none", "decoder", "all"), default="none",
                       help="share target embedding and generator (decoder), and the source embedding too (all)")
    act = p.add_argument_group("adaptive computation time (--model universal)")
    act.add_argument("--max-depth", type=int, help="most steps per token (default 8)")
    act.add_argument("--act-threshold", type=float, help="halt once the summed halting probability exceeds this (default 0.99)")
    act.add_argument("--ponder-weight", type=float, help="weight of the ponder cost in the loss (default 0.01)")
    attn = p.add_argument_group("attention patterns",
                                "NAME[:ARGS] terms joined by + (union); causal-NAME keeps key <= query. "
                                "Names: full, causal, window:W, dilated:W,D, global:G, block:B, random:R[,SEED]")
    attn.add_argument("--enc-attention", default="full", metavar="SPEC", help="encoder self-attention, e.g. window:8+global:1")
    attn.add_argument("--dec-attention", default="causal", metavar="SPEC", help="decoder self-attention, e.g. causal-window:8")
    attn.add_argument("--cross-attention", default="full", metavar="SPEC", help="target -> source attention, e.g. window:2")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--seed", type=int, default=1)
    opt.add_argument("--epochs", type=int, default=10)
    opt.add_argument("--batch-size", type=int, help="sentences per batch (default 64 unless --batch-tokens)")
    opt.add_argument("--batch-tokens", type=int, help="source + target tokens per batch")
    opt.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step")
    opt.add_argument("--clip-norm", type=float, help="clip the gradient norm to this value")
    opt.add_argument("--warmup", type=int, default=400, help="Noam warm-up steps")
    opt.add_argument("--lr-factor", type=float, default=1.0, help="Noam factor")
    opt.add_argument("--label-smoothing", type=float, default=0.1)
    run = p.add_argument_group("running")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    run.add_argument("--valid-beam", type=int, default=1, help="beam for the per-epoch exact-match check")
    run.add_argument("--save-every", type=int, help="also write checkpoint_last.pt every N steps")
    run.add_argument("--viz-every", type=int, help="record attention maps of a validation sample every N epochs")
    run.add_argument("--max-steps", type=int, help="stop with a checkpoint after this many steps")
    run.add_argument("--select-by", choices=("loss", "token_accuracy", "exact_match"),
                     help="validation metric that picks checkpoint_best.pt (default: exact_match for copy/sort, else loss)")
    run.add_argument("--threads", type=int, help="torch CPU threads")
    _backend_option(run)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)


def _eval_parser(sub):
    p = sub.add_parser("evaluate", help="score a trained model on a split",
                       description="Loss, token accuracy and exact match of a run's model on a data split.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument("--beam", type=int, default=5, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _backend_option(p)
    p.set_defaults(func=cmd_evaluate)


def _translate_parser(sub):
    p = sub.add_parser("translate", help="decode input lines with a trained model",
                       description="Read one sentence per line (stdin or --input), write one decoded line each.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--input", help="file to read instead of stdin")
    p.add_argument("--beam", type=int, default=5, help="beam size (1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty")
    p.add_argument("--checkpoint", choices=("best", "last"), default="best")
    p.add_argument("--device", default="cpu")
    _backend_option(p)
    p.set_defaults(func=cmd_translate)


def _backend_option(group):
    group.add_argument("--attention-backend", choices=sorted(BACKENDS), default=DEFAULT_BACKEND,
                       help="same results, different speed: dgl: edge-wise DGL kernels; torch: the same "
                            "message passing as PyTorch ops (any device); blocked: block-sparse tiles (long "
                            "sequences, local patterns); padded: one dense tile per sample (batches of short "
                            "sentences); auto: padded where tiles are mostly edges, else dgl where DGL runs "
                            "on the device, else torch")


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse's own prints the whole usage first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def _viz_options(p):
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run trained with --viz-every N")
    p.add_argument("--relation", choices=("enc", "dec", "cross"), default="cross")
    p.add_argument("--layer", type=int, default=-1, help="layer index (negative counts from the last)")
    p.add_argument("--head", type=int, default=0)
    p.add_argument("-o", "--output", required=True, help="file to write")


def _animate_parser(sub):
    p = sub.add_parser("animate", help="animate recorded attention maps across epochs",
                       description="One frame per recorded epoch: a GIF for .gif, an HTML/JS player otherwise.")
    _viz_options(p)
    p.set_defaults(func=cmd_animate)


def _heatmap_parser(sub):
    p = sub.add_parser("heatmap", help="draw one recorded attention map",
                       description="A heatmap (or, with --graph, the bipartite attention graph) of one recorded epoch.")
    _viz_options(p)
    p.add_argument("--epoch", default="last", help="recorded epoch number, or 'last'")
    p.add_argument("--graph", action="store_true", help="draw the attention as a graph (edge width = weight)")
    p.set_defaults(func=cmd_heatmap)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphformer", description="The Transformer as message passing on graphs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _train_parser(sub)
    _eval_parser(sub)
    _translate_parser(sub)
    _animate_parser(sub)
    _heatmap_parser(sub)
    return parser


def cmd_train(args) -> int:
    import torch

    from graphformer.model import ModelConfig
    from graphformer.training.config import TrainConfig
    from graphformer.training.trainer import Trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    train_cfg = TrainConfig(
        task=args.task, data_dir=args.data_dir, seed=args.seed, epochs=args.epochs, batch_size=args.batch_size,
        batch_tokens=args.batch_tokens, accumulate=args.accumulate, clip_norm=args.clip_norm, warmup=args.warmup,
        lr_factor=args.lr_factor, label_smoothing=args.label_smoothing, min_count=args.min_count,
        shared_vocab=not args.separate_vocab, train_limit=args.train_limit, device=args.device, valid_beam=args.valid_beam,
        save_every=args.save_every, max_steps=args.max_steps, select_by=args.select_by,
        viz_every=args.viz_every)
    model_cfg = None
    if not args.resume:
        model_cfg = ModelConfig(src_vocab=1, tgt_vocab=1, layers=args.layers, d_model=args.d_model, heads=args.heads,
                                d_ff=args.d_ff, dropout=args.dropout, norm_first=args.norm == "pre",
                                positions=args.positions, max_len=args.max_len, tie=args.tie,
                                enc_attention=args.enc_attention, dec_attention=args.dec_attention,
                                cross_attention=args.cross_attention, model=args.model, max_depth=args.max_depth,
                                act_threshold=args.act_threshold, ponder_weight=args.ponder_weight)
    trainer = Trainer(args.out, model_cfg, train_cfg, resume=args.resume, show_progress=not args.quiet)
    trainer.model.attention_backend = args.attention_backend
    try:
        metrics = trainer.run()
    finally:
        trainer.close()
    if not trainer.ctx.is_main:
        return 0
    if trainer.interrupted:
        print(f"interrupted at step {trainer.progress['step']}; checkpoint written to {args.out}; "
              f"continue with: graphformer train --out {args.out} --resume", file=sys.stderr)
        return 130
    where = f"step {trainer.progress['step']}, epoch {trainer.progress['epoch']}"
    if metrics:
        print(f"done ({where}): valid loss {metrics['valid_loss']:.4f}, token accuracy "
              f"{metrics['valid_token_accuracy']:.4f}, exact match {metrics['valid_exact_match']:.4f}")
    else:
        print(f"stopped at {where}; checkpoint in {args.out}")
    return 0


def cmd_evaluate(args) -> int:
    from graphformer.training.evaluate import evaluate
    from graphformer.training.run import LoadedRun

    if args.beam < 1:
        raise UserError(f"--beam must be at least 1, got {args.beam}")
    run = LoadedRun(args.run_dir, args.checkpoint, args.device)
    run.model.attention_backend = args.attention_backend
    _, detokenize = run.pipelines()
    scores = evaluate(run.model, run.split(args.split), run.model.make_pool(), beam=args.beam, alpha=args.alpha,
                      tgt_vocab=run.tgt_vocab, references=run.references(args.split), detokenize=detokenize)
    scores.update(split=args.split, beam=args.beam, alpha=args.alpha, checkpoint=str(run.path))
    if args.json:
        print(json.dumps(scores))
    else:
        bleu = f" bleu={scores['bleu']:.2f} bleu_tokenized={scores['bleu_tokenized']:.2f}" if "bleu" in scores else ""
        print(f"{args.split}: n={scores['n']} loss={scores['loss']:.4f} token_accuracy={scores['token_accuracy']:.4f} "
              f"exact_match={scores['exact_match']:.4f}{bleu} (beam {args.beam})")
    return 0


def cmd_translate(args) -> int:
    from graphformer.decoding import translate_ids
    from graphformer.training.run import LoadedRun

    if args.beam < 1:
        raise UserError(f"--beam must be at least 1, got {args.beam}")
    run = LoadedRun(args.run_dir, args.checkpoint, args.device)
    run.model.attention_backend = args.attention_backend
    raw = open(args.input, "rb").read() if args.input else sys.stdin.buffer.read()
    name = args.input or "standard input"
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise UserError(f"{name}: line {line} is not valid UTF-8; convert the input to UTF-8") from None
    limit = run.model.cfg.max_len - 1  # the source's </s> takes the last position
    tokenize, detokenize = run.pipelines()
    src = []
    for i, line in enumerate(lines, 1):
        ids = run.src_vocab.encode(tokenize(line))
        if len(ids) > limit:
            print(f"graphformer: warning: line {i} has {len(ids)} tokens; translating its first {limit}",
                  file=sys.stderr)
            ids = ids[:limit]
        src.append(ids)
    nonempty = [i for i, s in enumerate(src) if s]
    hyps = translate_ids(run.model, [src[i] for i in nonempty], beam=args.beam, alpha=args.alpha) if nonempty else []
    out = [""] * len(src)
    for i, hyp in zip(nonempty, hyps):
        out[i] = detokenize(run.tgt_vocab.decode(hyp.tokens))
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


def _pick(record: dict, args):
    maps = record["maps"][args.relation]
    layers, heads = maps.shape[:2]
    if not -layers <= args.layer < layers:
        raise UserError(f"--layer {args.layer} is out of range: the model has {layers} layers")
    if not 0 <= args.head < heads:
        raise UserError(f"--head {args.head} is out of range: the model has {heads} heads")
    src = record["src_labels"]
    keys, queries = {"enc": (record.get("enc_labels", src),) * 2,  # enc: tokens, then any span nodes
                     "dec": (record["tgt_labels"],) * 2, "cross": (src, record["tgt_labels"])}[args.relation]
    title = f"{args.relation} layer {args.layer % layers} head {args.head}, epoch {record['epoch']}"
    return maps[args.layer, args.head], keys, queries, title


def cmd_animate(args) -> int:
    from graphformer.viz.plots import animate
    from graphformer.viz.recording import load_records

    records = load_records(args.run_dir)
    picked = [_pick(r, args) for r in records]
    n = animate([p[0] for p in picked], picked[0][1], picked[0][2], [p[3] for p in picked], args.output)
    print(f"wrote {args.output}: {n} frames (epochs {records[0]['epoch']}..{records[-1]['epoch']})")
    return 0


def cmd_heatmap(args) -> int:
    from graphformer.viz.plots import bipartite_graph, save_heatmap
    from graphformer.viz.recording import load_records

    records = load_records(args.run_dir)
    if args.epoch == "last":
        record = records[-1]
    else:
        chosen = [r for r in records if str(r["epoch"]) == args.epoch]
        if not chosen:
            raise UserError(f"epoch {args.epoch} was not recorded; recorded: {', '.join(str(r['epoch']) for r in records)}")
        record = chosen[0]
    weights, keys, queries, title = _pick(record, args)
    (bipartite_graph if args.graph else save_heatmap)(weights, keys, queries, args.output, title)
    print(f"wrote {args.output}")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UserError, ValueError) as err:
        if os.environ.get("GRAPHFORMER_DEBUG"):
            raise
        print(f"graphformer: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graphformer: interrupted", file=sys.stderr)
        return 130
