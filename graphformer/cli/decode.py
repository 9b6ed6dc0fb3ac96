"""``graphformer evaluate`` and ``graphformer translate``: load a run's model and decode with it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from graphformer.cli.parser import given
from graphformer.cli.signals import interrupts_between_steps
from graphformer.errors import UserError
from graphformer.training.config import DecodeConfig, TrainConfig, check_backend_serves


def _load_run(args):
    from graphformer.running.loaded import LoadedRun
    from graphformer.training.run_dir import BEST, LAST

    decoding = DecodeConfig(**given(args, DecodeConfig))
    backend = getattr(args, "attention_backend", TrainConfig.defaults()["attention_backend"])
    run = LoadedRun(args.run_dir, args.checkpoint, args.device, attention_backend=backend)
    check_backend_serves(run.model.cfg, backend)  # before any input is read: the first batch would fail
    asked = {"best": BEST, "last": LAST}.get(args.checkpoint)  # find_checkpoint falls back from one to the other
    if asked and run.path.name != asked:
        print(
            f"graphformer: warning: {args.run_dir} has no {asked} (yet: best is written at the end of an epoch); "
            f"using {run.path.name}",
            file=sys.stderr,
        )
    return run, decoding


def _precision_context(precision: str, device):
    """The context to decode in ``--precision`` (see `graphformer.precision`), with a warning
    where a CPU would emulate bfloat16."""
    from graphformer.precision import autocast, warn_if_emulated

    context = autocast(precision, device)
    warn_if_emulated(precision, device)
    return context


def cmd_evaluate(args) -> int:
    from tqdm.auto import tqdm

    from graphformer.attention import flex_calls
    from graphformer.evaluation.scores import evaluate, headline

    before = flex_calls.snapshot()
    run, decoding = _load_run(args)
    precision = _precision_context(decoding.precision, run.device)
    _, detokenize = run.pipelines()
    references = None if args.data_dir else run.references(args.split)
    split = run.split(args.split, args.data_dir)
    if args.data_dir:
        _warn_about_unknown_tokens(split, args.data_dir, run.task.data_dir(run.train_cfg, run.run_dir))
    # Decoding a test set can take minutes: a bar for whoever watches (stderr a terminal), not for logs.
    with (
        tqdm(
            total=len(split), unit="sentence", desc="decoding", file=sys.stderr, disable=not sys.stderr.isatty()
        ) as bar,
        precision,
    ):
        scores = evaluate(
            run.model,
            split,
            run.model.make_pool(),
            beam=decoding.beam,
            alpha=decoding.alpha,
            tgt_vocab=run.tgt_vocab,
            references=references,
            detokenize=detokenize,
            bleu_tokenize=run.bleu_tokenize(),
            progress=bar.update,
            batch_tokens=decoding.batch_tokens,
        )
    searched = not run.model.cfg.classifies  # a classifier's label is its argmax: no beam, no length penalty
    scores.update(
        split=args.split,
        **({"beam": decoding.beam, "alpha": decoding.alpha} if searched else {}),
        batch_tokens=decoding.batch_tokens,
        precision=decoding.precision,
        checkpoint=str(run.path),
        **({"data_dir": args.data_dir} if args.data_dir else {}),
    )
    if args.json:
        print(json.dumps(scores))
    else:
        bleu = f" bleu={scores['bleu']:.2f} bleu_tokenized={scores['bleu_tokenized']:.2f}" if "bleu" in scores else ""
        # exact match is absent where per-sample edges in the decoder leave teacher forcing only
        print(
            f"{args.split}: n={scores['n']} {headline(scores)}{bleu}"
            + (f" (beam {decoding.beam})" if searched else "")
            + (f" in {decoding.precision}" if decoding.precision != "float32" else "")
        )
    flex_calls.report(run.model.attention_backend, before, sys.stderr)
    return 0


def _warn_about_unknown_tokens(split, folder: str, own: Path) -> None:
    """A folder's files are read as they are: tokens the run never saw (raw text given to a run
    of Moses words or subword pieces) are `<unk>`, and scores of them mislead."""
    from graphformer.vocab import UNK

    ids = [i for side in (split.src, split.tgt) for sentence in side for i in sentence]
    unknown = sum(i == UNK for i in ids)
    if unknown:
        print(
            f"graphformer: warning: {unknown} of the {len(ids)} tokens in {folder} ({100 * unknown / len(ids):.1f}%) "
            f"are not in the run's vocabulary and read as <unk>; give files tokenized as the run's own ({own})",
            file=sys.stderr,
        )


def read_input(path: str | None) -> list[str]:
    """The lines to translate, from a file or standard input."""
    from graphformer.data.text import decode_utf8, split_lines

    if path is not None and not Path(path).is_file():
        what = "a directory" if Path(path).is_dir() else "not found"
        raise UserError(f"--input {path}: {what}; give a text file with one sentence per line")
    raw = Path(path).read_bytes() if path else sys.stdin.buffer.read()
    return split_lines(decode_utf8(raw, path or "standard input", "the input"))


def input_lines(args) -> list[str]:
    """``attend``'s lines: those of every ``--input TEXT``, or of ``--input-file FILE``."""
    if args.input_file is None:
        return list(args.input)
    if not Path(args.input_file).is_file():
        what = "a directory" if Path(args.input_file).is_dir() else "not found"
        raise UserError(f"--input-file {args.input_file}: {what}; give a text file with one input per line")
    return read_input(args.input_file)


def write_attended(results, output: str | None, maps_path: str | None, draw) -> None:
    """``attend``'s ending: the pictures (``draw(results, output)``, the paths written) and the
    ``--save-maps`` file, whole files even on a Ctrl-C; then each line with what the model made of
    it on stdout, and the files written on stderr."""
    from graphformer.viz.attend_views import save_maps

    with interrupts_between_steps():  # a Ctrl-C while drawing or writing waits for whole files, then stops
        written = [] if output is None else draw(results, output)
        if maps_path is not None:
            save_maps(results, maps_path)
            written.append(Path(maps_path))
    for result in results:
        print(f"{result.line}\t{result.title}")
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)


def cmd_translate(args) -> int:
    from graphformer.attention import flex_calls
    from graphformer.decoding import check_decodable
    from graphformer.decoding.inputs import encode_lines, source_limit
    from graphformer.graphs.sample_edges import edges_of_lines

    before = flex_calls.snapshot()
    run, decoding = _load_run(args)
    pool = run.model.make_pool()
    check_decodable(pool)  # before any input is read or any progress is shown: the one line said is why
    precision = _precision_context(decoding.precision, run.device)
    lines = read_input(args.input)
    if not lines:
        print(f"graphformer: warning: {args.input or 'standard input'} is empty; nothing to translate", file=sys.stderr)
    tokenize, detokenize = run.pipelines()
    source = encode_lines(lines, tokenize, run.src_vocab, source_limit(run.model, pool))
    edges = edges_of_lines(pool, source.words, args.edges)  # a line that does not parse: one error
    _warn_about_input(source, source_limit(run.model, pool))
    with precision:
        status = _translate(run, decoding, pool, source.ids, detokenize, quiet=args.quiet, edges=edges)
    flex_calls.report(run.model.attention_backend, before, sys.stderr)
    return status


def _warn_about_input(source, limit: int) -> None:
    """One warning per cut line, and one for the tokens outside the vocabulary."""
    for number, length in source.truncated:
        print(
            f"graphformer: warning: line {number} has {length} tokens; translating its first {limit}", file=sys.stderr
        )
    unknown = source.unknown
    if unknown:
        more = ", ..." if len(unknown) > 10 else ""
        print(
            f"graphformer: warning: {sum(unknown.values())} input tokens ({len(unknown)} distinct) are not in the "
            f"vocabulary and read as <unk>: {', '.join(source.most_unknown(10))}{more}",
            file=sys.stderr,
        )


def _translate(run, decoding, pool, src: list[list[int]], detokenize, quiet: bool, edges=None) -> int:
    """Decode ``src`` and write one line each to stdout, in order, chunk by chunk."""
    from tqdm.auto import tqdm

    from graphformer.data.batching import decoding_chunks
    from graphformer.decoding import translate_ids

    out = [""] * len(src)
    nonempty = [i for i, s in enumerate(src) if s]
    tic, tokens, written = time.perf_counter(), 0, 0
    try:
        with tqdm(
            total=len(nonempty), unit="sentence", disable=quiet or sys.stdout.isatty() or not nonempty, file=sys.stderr
        ) as bar:
            for chunk in decoding_chunks([len(s) for s in src], decoding.batch_tokens):
                todo = [i for i in chunk if src[i]]
                # Decoded in batches of similar lengths (no padding is ever computed, but a batch
                # waits for its longest sentence); the output keeps the input's order.
                hyps = translate_ids(
                    run.model,
                    [src[i] for i in todo],
                    beam=decoding.beam,
                    alpha=decoding.alpha,
                    batch_tokens=decoding.batch_tokens,
                    pool=pool,
                    progress=bar.update,
                    edges=None if edges is None else [edges[i] for i in todo],
                )
                for i, hyp in zip(todo, hyps):
                    out[i] = detokenize(run.tgt_vocab.decode(hyp.tokens))
                    tokens += len(hyp.tokens)
                with interrupts_between_steps():  # a Ctrl-C while writing waits for the chunk's last line
                    sys.stdout.write("".join(out[i] + "\n" for i in chunk))
                    sys.stdout.flush()
                    written = chunk.stop
    except KeyboardInterrupt:
        print(
            f"graphformer: interrupted; the translations of the first {written} of {len(src)} lines are written "
            f"(translate the lines after them to finish)",
            file=sys.stderr,
        )
        return 130
    if not quiet and nonempty:
        _say_throughput(len(nonempty), tokens, max(time.perf_counter() - tic, 1e-9))
    return 0


def _say_throughput(sentences: int, tokens: int, seconds: float) -> None:
    count = f"{sentences} sentence{'s' if sentences != 1 else ''}"
    print(
        f"translated {count} ({tokens} tokens) in {seconds:.1f} s: {sentences / seconds:.1f} sentences/s, "
        f"{tokens / seconds:.0f} tokens/s",
        file=sys.stderr,
    )
