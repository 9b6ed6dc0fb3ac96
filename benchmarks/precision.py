"""Decoding in bfloat16 against float32, with a trained translation run: speed, agreement, BLEU.

The run's test split (its first ``--sentences``) is decoded in the batches by length that
``graphformer translate --precision P`` makes (`decoding_batches`; the graph decoder), greedy and
with ``--beam``, in float32 and under torch.autocast in bfloat16 (`graphformer.precision`), after
an untimed warm-up. Rows give sentences/s, the speed against float32, the share of outputs
identical to float32's, and BLEU (sacrebleu and tokenized, as ``evaluate`` scores it).

Whether bfloat16 pays depends on the CPU: with bfloat16 instructions (AVX512-BF16, AMX) its
matrix products are native; without them PyTorch emulates them. The JSON records the CPU's
flags that say so, and the variables that make PyTorch and oneDNN act as on an older CPU
(``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``: no bfloat16 instructions).

    python -m benchmarks.precision --run RUN_DIR [--checkpoint best] [--beam 5] [--alpha 0.6]
                                   [--rounds 2] [--sentences N] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from benchmarks.harness import command, interleaved, write_result
from graphformer.cli import at_least_one
from graphformer.data.corpus import Split
from graphformer.decoding import DEFAULT_ALPHA, translate_ids
from graphformer.errors import UserError
from graphformer.evaluation.scores import bleu_of
from graphformer.precision import autocast, cpu_bfloat16_instructions, emulation_warning
from graphformer.running.loaded import LoadedRun

BENCHED = ("float32", "bfloat16")


def parse_args() -> tuple[argparse.Namespace, LoadedRun, Split, list]:
    """(options, the run, its test split or the split's first ``--sentences``, their references)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, metavar="RUN_DIR", help="a trained translation run")
    parser.add_argument("--checkpoint", default="best", help="best, last, averaged or a file (default: best)")
    parser.add_argument("--beam", type=at_least_one, default=5, help="the beam besides greedy (default: 5)")
    parser.add_argument(
        "--alpha", type=float, default=DEFAULT_ALPHA, help=f"length penalty of the beam (default: {DEFAULT_ALPHA})"
    )
    parser.add_argument("--rounds", type=at_least_one, default=2, help="timed rounds (the best counts)")
    parser.add_argument("--sentences", type=at_least_one, help="decode only the test split's first N sentences")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    try:
        run = LoadedRun(args.run, args.checkpoint)
        references = run.references("test")
        if references is None:
            raise UserError(f"{args.run} is not a translation run (its task has no references for BLEU)")
        split = run.split("test")
    except UserError as err:
        parser.error(f"--run: {err}")
    if args.sentences:
        n = args.sentences
        split, references = (
            Split(split.src_words[:n], split.tgt_words[:n], split.src[:n], split.tgt[:n]),
            references[:n],
        )
    return args, run, split, references


def beam_rows(args, run: LoadedRun, split: Split, references: list, beam: int) -> list[dict]:
    """Both precisions' rows at ``beam``: each decodes the split once a round, in turn."""
    hyps = {}

    def decode(precision):
        with autocast(precision, run.device):
            hyps[precision] = translate_ids(run.model, split.src, beam=beam, alpha=args.alpha)

    seconds = interleaved({p: (lambda p=p: decode(p)) for p in BENCHED}, args.rounds)
    reference = [h.tokens for h in hyps["float32"]]
    _, detokenize = run.pipelines()
    rows = []
    for precision in BENCHED:
        best = min(seconds[precision])
        same = sum(h.tokens == r for h, r in zip(hyps[precision], reference)) / len(reference)
        bleu = bleu_of(hyps[precision], split, run.tgt_vocab, references, detokenize, run.bleu_tokenize())
        rows.append(
            {
                "precision": precision,
                "beam": beam,
                "alpha": args.alpha if beam > 1 else None,
                "seconds": best,
                "sentences_per_s": len(reference) / best,
                "vs_float32": min(seconds["float32"]) / best,
                "identical_to_float32": same,
                "bleu": bleu["bleu"],
                "bleu_tokenized": bleu["bleu_tokenized"],
                "seconds_per_round": seconds[precision],
            }
        )
        print(
            f"beam {beam} {precision:8s} {rows[-1]['sentences_per_s']:7.1f} sentences/s "
            f"{rows[-1]['vs_float32']:.2f}x float32, {100 * same:.1f}% identical, "
            f"BLEU {bleu['bleu']:.2f} (tokenized {bleu['bleu_tokenized']:.2f})"
        )
    return rows


def main():
    args, run, split, references = parse_args()
    if emulation_warning("bfloat16", run.device):  # said in the benchmark's words: it has no --precision
        print("this CPU has no bfloat16 instructions: PyTorch emulates them, and the bfloat16 rounds take long")
    for precision in BENCHED:  # warm-up: the first products in a dtype set up their kernels
        with autocast(precision, run.device):
            translate_ids(run.model, split.src[:64], beam=args.beam, alpha=args.alpha)
    rows = [row for beam in sorted({1, args.beam}) for row in beam_rows(args, run, split, references, beam)]
    argv = ["--run", args.run, "--checkpoint", args.checkpoint, "--beam", args.beam, "--alpha", args.alpha]
    argv += ["--rounds", args.rounds] + (["--sentences", args.sentences] if args.sentences else [])
    write_result(
        args.out,
        "precision.json",
        command("precision", [str(a) for a in argv]),
        {"sentences": len(split), "rows": rows},
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        bfloat16_instructions=cpu_bfloat16_instructions(),
        # what limits the kernels PyTorch and oneDNN pick (to emulate an older CPU)
        environment={
            name: os.environ[name] for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if name in os.environ
        },
    )


if __name__ == "__main__":
    main()
