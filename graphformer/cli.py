"""The ``graphformer`` command: train, evaluate, translate, average, animate, heatmap.

    graphformer train --task copy --out runs/copy
    graphformer evaluate runs/copy --split test --json
    echo "h e l l o" | graphformer translate runs/copy

The options of ``train`` (and the decoding options) are built from the config dataclasses'
fields (`graphformer.config_io`): one default, help text and list of choices each. Commands
import their machinery when they run, so ``--help`` and argument errors need neither torch nor
DGL. Errors a user can fix (`graphformer.errors.UserError`) are printed as one line
(``graphformer: error: ...``) with exit status 2; anything else is a bug and keeps its
traceback. Set GRAPHFORMER_DEBUG=1 to see the traceback of a user error too.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import MISSING, fields
from pathlib import Path

from graphformer.errors import ConfigError, UserError
from graphformer.model.config import ModelConfig, unused_layers
from graphformer.training.config import (
    DEVICES,
    PER_PROCESS,
    RESUME_OVERRIDES,
    RUNTIME,
    DecodeConfig,
    TrainConfig,
    absolute_paths,
    differs,
    resume_config,
    with_flags,
)


class _ShowDefaults(argparse.HelpFormatter):
    """Every option's default in its help, once: added where the help does not already say it
    (config options say theirs; options without a meaningful default say nothing)."""

    def _get_help_string(self, action):
        help_text = action.help or ""
        quiet = (None, False, argparse.SUPPRESS)
        if "default" in help_text or any(action.default is q for q in quiet) or not action.option_strings:
            return help_text
        return help_text + " (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse's own prints the whole usage first), no
    abbreviated options (``--epoch 2`` must not quietly mean ``--epochs 2``), and defaults shown."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, formatter_class=_ShowDefaults, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_options(group, config_class, skip=()) -> None:
    """One option per field of a config dataclass, with the field's help, choices and default.

    Options the user does not give stay absent from the parsed namespace (default SUPPRESS), so
    that a config file or a resumed run can supply them; the field's own default is shown."""
    for f in fields(config_class):
        meta = f.metadata
        if not meta.get("cli", True) or f.name in skip:
            continue
        help_text = meta.get("help", "")
        if f.default is not MISSING and f.default is not None:
            shown = ("on" if f.default else "off") if isinstance(f.default, bool) else f.default
            help_text += f" (default: {shown})"
        kwargs = dict(dest=f.name, default=argparse.SUPPRESS, help=help_text.replace("%", "%%"))
        kind = str(f.type)
        if "bool" in kind:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = int if "int" in kind else float if "float" in kind else str
            if meta.get("choices"):
                kwargs["choices"] = meta["choices"]
            kwargs["metavar"] = meta.get("metavar") or {int: "N", float: "X", str: "NAME"}[kwargs["type"]]
        group.add_argument(flag(f.name), **kwargs)


def given(args, config_class) -> dict:
    """The fields of ``config_class`` that the command line set."""
    return {f.name: getattr(args, f.name) for f in fields(config_class) if hasattr(args, f.name)}


def _train_parser(sub):
    p = sub.add_parser(
        "train",
        help="train a model",
        description="Train a graph Transformer and write a run directory. "
        "Attention patterns (SPEC): NAME[:ARGS] terms joined by + (union); causal-NAME keeps key <= query. "
        "Names: full, causal, window:W, dilated:W,D, global:G, block:B, random:R[,SEED], tree:K "
        "(encoder only).",
    )
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory for checkpoints, logs and vocabulary")
    flags = lambda names: ", ".join("--" + name.replace("_", "-") for name in names)  # noqa: E731
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its last checkpoint, with "
        f"its saved configuration (only {flags(RESUME_OVERRIDES)}, how it runs: {flags(RUNTIME)}, and "
        f"{flags(PER_PROCESS)} on another number of processes, keeping accumulate x processes, may change)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="options from a YAML or JSON file {model: {...}, train: {...}} "
        "(a run's config.json is one); flags given here override it",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument(
        "--processes",
        type=at_least_one,
        default=1,
        metavar="N",
        help="train with N processes on this machine, each on its share of every step's batches (gloo "
        "on CPUs; NCCL on GPUs, one each); Ctrl-C stops them all after the same step, with a checkpoint",
    )
    add_config_options(p.add_argument_group("model"), ModelConfig)
    add_config_options(p.add_argument_group("training"), TrainConfig)
    p.set_defaults(func=cmd_train)


def _eval_parser(sub):
    p = sub.add_parser(
        "evaluate",
        help="score a trained model on a split",
        description="Loss, token accuracy and exact match (and BLEU for translation) of a run's model on a data split.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"), help="the split to score")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="score the split of this folder ({split}.src, {split}.tgt, "
        "tokenized as the run's own data folder) instead of the run's own data, e.g. longer samples of "
        "the same task (no BLEU)",
    )
    _decoding_options(p)
    p.set_defaults(func=cmd_evaluate)


def _translate_parser(sub):
    p = sub.add_parser(
        "translate",
        help="decode input lines with a trained model",
        description="Read one sentence per line (stdin or --input), write one decoded line each.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--input", metavar="FILE", help="file to read instead of standard input")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no throughput line (warnings stay)")
    _decoding_options(p)
    p.set_defaults(func=cmd_translate)


def _decoding_options(p):
    add_config_options(p, DecodeConfig)
    p.add_argument(
        "--checkpoint",
        default="best",
        metavar="WHICH",
        help="best, last, averaged (see graphformer average) or a checkpoint file; best and last "
        "stand in for each other while a run has only one of them",
    )
    p.add_argument("--device", default="cpu", help=DEVICES)
    add_config_options(p, TrainConfig, skip=[f.name for f in fields(TrainConfig) if f.name != "attention_backend"])


def _average_parser(sub):
    p = sub.add_parser(
        "average",
        help="average the weights of kept epoch checkpoints",
        description="Write RUN_DIR/checkpoint_averaged.pt, the mean of the weights of the last N "
        "(or best N by validation metric) epoch checkpoints that training kept with "
        "--keep-last; evaluate and translate read it with --checkpoint averaged.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--last", type=int, metavar="N", help="the N newest kept epochs")
    which.add_argument(
        "--best", type=int, metavar="N", help="the N kept epochs with the best validation metric (the run's select_by)"
    )
    p.add_argument("-o", "--output", help="file to write (default: RUN_DIR/checkpoint_averaged.pt)")
    p.set_defaults(func=cmd_average)


def at_least_one(text: str) -> int:
    """An argparse type: a whole number of at least 1 (counts of rounds, steps, sentences)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _head(text: str):
    """--head: a head index, or 'all' for one panel per head."""
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a head number or 'all', got {text!r}") from None


def _viz_options(p) -> argparse._MutuallyExclusiveGroup:
    """The options animate and heatmap share; returns the group of --view (heatmap adds --graph)."""
    # the choices of graphformer.viz.plots.SCALES and VIEWS and viz.maps.RELATIONS (not imported: --help stays
    # fast; a test keeps them equal)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run trained with --viz-every N")
    p.add_argument(
        "--relation",
        choices=("enc", "dec", "cross"),
        help="enc: source -> source, dec: decoder inputs -> decoder inputs, cross: source -> decoder inputs "
        "(default: cross; enc for an encoder classifier, which has no other)",
    )
    p.add_argument("--layer", type=int, default=-1, help="layer index (negative counts from the last)")
    p.add_argument("--head", type=_head, default=0, metavar="N|all", help="head index, or all: one panel per head")
    p.add_argument(
        "--scale",
        choices=("shared", "per-head"),
        default="shared",
        help="colour scale: shared (0 to 1 in every panel) or per-head (0 to each panel's largest weight)",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--view",
        choices=("heatmap", "graph", "both"),
        default="heatmap",
        help="heatmap, graph (bipartite drawing, edge width = weight), or both side by side",
    )
    p.add_argument("-o", "--output", required=True, help="file to write")
    return view


def _animate_parser(sub):
    p = sub.add_parser(
        "animate",
        help="animate recorded attention maps across epochs",
        description="One frame per recorded epoch (epoch 0 is the untrained model): an animated "
        "GIF for .gif, a self-contained HTML player for .html.",
    )
    _viz_options(p)
    p.set_defaults(func=cmd_animate)


def _heatmap_parser(sub):
    p = sub.add_parser(
        "heatmap",
        help="draw one recorded attention map",
        description="A heatmap (or, with --graph, the bipartite attention graph) of one recorded "
        "epoch, as .png, .svg, .pdf, .jpg or .jpeg.",
    )  # graphformer.viz.plots.IMAGE_FORMATS
    view = _viz_options(p)
    p.add_argument("--epoch", default="last", help="recorded epoch number (0: untrained), or 'last'")
    view.add_argument("--graph", dest="view", action="store_const", const="graph", help="same as --view graph")
    p.set_defaults(func=cmd_heatmap)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="graphformer", description="The Transformer as message passing on graphs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _train_parser(sub)
    _eval_parser(sub)
    _translate_parser(sub)
    _average_parser(sub)
    _animate_parser(sub)
    _heatmap_parser(sub)
    for command in sub.choices.values():  # unrecognized arguments are found by the top parser: name the command's help
        command.set_defaults(command_prog=command.prog)
    return parser


def read_config_file(path: str) -> tuple[dict, dict]:
    """The (model, train) options of a YAML or JSON config file."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(
            f"--config {path}: cannot read it ({err.__class__.__name__}); give a YAML or JSON file"
        ) from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UserError(f"--config {path} is not valid YAML or JSON ({str(err).splitlines()[0]})") from None
    config = config or {}
    if not isinstance(config, dict):
        raise UserError(f"--config {path} must hold a 'model' and/or a 'train' mapping, like a run's config.json")
    unknown = [str(name) for name in config if name not in ("model", "train")]  # YAML keys need not be text
    if unknown:
        what = (
            f"{unknown[0]!r} is not a section"
            if len(unknown) == 1
            else f"{', '.join(map(repr, unknown))} are not sections"
        )
        raise UserError(
            f"--config {path}: {what}; the sections are 'model' and 'train' (either or both), like a run's config.json"
        )
    model, train = config.get("model") or {}, config.get("train") or {}
    for name, section, cls in (("model", model, ModelConfig), ("train", train, TrainConfig)):
        if not isinstance(section, dict):
            raise UserError(
                f"--config {path}: '{name}' must be a mapping of options (name: value), not "
                f"{type(section).__name__} {section!r}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise UserError(f"--config {path}: {name}.{unknown[0]} is not an option; see graphformer train --help")
    model = {k: v for k, v in model.items() if k not in ("src_vocab", "tgt_vocab")}  # taken from the data
    return model, train


def train_configs(args) -> tuple[ModelConfig, TrainConfig]:
    """The configuration of the run to train: the dataclass defaults, then --config, then flags
    (with --init-from, the model options of its checkpoint come first); when resuming, the run's
    saved configuration, then what may change (see ``resume_config``)."""
    model_given, train_given = given(args, ModelConfig), given(args, TrainConfig)
    if args.config:
        model_file, train_file = read_config_file(args.config)
        model_given, train_given = {**model_file, **model_given}, with_flags(train_file, train_given)
    train_given = absolute_paths(train_given)
    if train_given.get("init_from") and not args.resume:
        model_given = {**init_model_options(train_given["init_from"]), **model_given}
    if args.resume:
        from graphformer.training.run_dir import CONFIG, RunDir

        run = RunDir(args.out)
        if not (run / CONFIG).is_file():
            raise UserError(f"--resume: no run to continue in {args.out} (no {CONFIG}); start it without --resume")
        model_saved, train_saved = run.read_config()
        saved = ModelConfig.from_dict(model_saved)
        for name, value in model_given.items():
            if getattr(saved, name) != value:
                raise ConfigError(
                    name,
                    f"{differs(getattr(saved, name), value)}: a resumed run keeps its model; "
                    "start a new run to change it",
                )
        return saved, resume_config(TrainConfig.from_dict(absolute_paths(train_saved)), train_given)
    return ModelConfig(src_vocab=1, tgt_vocab=1, **model_given), TrainConfig(**train_given)


def ignored_flags_warning(args, model_cfg: ModelConfig) -> str | None:
    """A warning for a flag given on this command line that the model has no use for."""
    why = unused_layers(model_cfg.model)
    if why and "layers" in given(args, ModelConfig):
        return f"graphformer: warning: --{why} (--max-depth: {model_cfg.max_depth})"
    return None


def init_model_options(where: str) -> dict:
    """The model options of the checkpoint ``--init-from`` names: a new run's defaults, so that
    only what changes (an attention pattern, dropout, max_len) needs to be given."""
    from graphformer.training.run import read_init

    saved = dict(read_init(where)[0]["model_config"])
    for name in ("src_vocab", "tgt_vocab"):  # the run's vocabularies set these
        saved.pop(name)
    return saved


def cmd_train(args) -> int:
    from graphformer.training.run_dir import resume_command

    model_cfg, train_cfg = train_configs(args)  # before any process starts: a mistake gets one line, once
    world = os.environ.get("WORLD_SIZE")
    if args.processes > 1 and world is None:  # start the processes, each of which runs this command
        from graphformer.training.distributed import check_devices_for
        from graphformer.training.launch import run_processes

        check_devices_for(args.processes, train_cfg.device)
        return run_processes(args.argv, args.processes, resume_command(args.out, args.processes))
    if args.processes > 1 and world != str(args.processes):
        raise UserError(
            f"--processes {args.processes} starts its own processes, but this one is already one of "
            f"{world} (torchrun): leave --processes out, or run it without torchrun"
        )
    from graphformer.training.launch import follow_launcher
    from graphformer.training.trainer import Trainer

    follow_launcher()

    trainer = Trainer(
        args.out, model_cfg, train_cfg, resume=args.resume, show_progress=not args.quiet, abort=_abort_training
    )
    warning = None if args.resume else ignored_flags_warning(args, model_cfg)
    if warning and trainer.ctx.is_main:  # after the run's checks: an error stays the only line
        print(warning, file=sys.stderr)
    try:
        metrics = trainer.run()
    except BaseException:
        trainer.close(failed=True)
        raise
    if trainer.interrupted:
        _abort_on_ctrl_c_at_exit()
    trainer.close()
    if not trainer.ctx.is_main:
        return 0
    resume = resume_command(args.out, trainer.ctx.world, trainer.ctx.per_node)
    if trainer.interrupted:
        print(
            f"interrupted at step {trainer.progress['step']}; checkpoint written to {args.out}; "
            f"continue with: {resume}",
            file=sys.stderr,
        )
        return 130
    cfg, progress = trainer.cfg, trainer.progress
    where = f"step {progress['step']}, {progress['epoch']} of {cfg.epochs} epochs complete"
    scores = metrics and (
        f"valid loss {metrics['valid_loss']:.4f}, token accuracy "
        f"{metrics['valid_token_accuracy']:.4f}, exact match {metrics['valid_exact_match']:.4f}"
    )
    if scores and progress["epoch"] < cfg.epochs and cfg.out_of_patience(progress):
        span = f"{cfg.patience} epochs" if cfg.patience != 1 else "1 epoch"
        print(f"stopped early ({where}: no better valid {cfg.select_by} in the last {span}): {scores}")
    elif scores and _finished(cfg, progress):
        print(f"done ({where}): {scores}")
    else:  # --max-steps or --max-minutes ended it first
        print(
            f"stopped at {where}{f' ({scores})' if scores else ''}; checkpoint in {args.out}; "
            f"{_how_to_go_on(trainer.cfg, trainer.progress, resume)}"
        )
    return 0


def _abort_training() -> None:
    """A second Ctrl-C in training: one line, and exit 130 at once. A KeyboardInterrupt could land
    anywhere, inside torch.save (whose zip writer then raises an error of its own) or in an exit
    hook, and end in a traceback. Ending without clean-up loses nothing: files are written to a
    temporary and renamed (`graphformer.files`), and the next run removes a temporary left behind."""
    try:
        sys.stdout.flush()
        _say("interrupted")
    finally:
        os._exit(130)


def _abort_on_ctrl_c_at_exit() -> None:
    """Training stopped for a Ctrl-C and gave the signal back; another one is the second still, and
    may land in an exit hook (torch has some): there too it must be `_abort_training`. Set when the
    interpreter exits, not now, since main() also runs inside other programs (the tests). Exit hooks
    run last registered first, so this one runs before torch's."""
    atexit.unregister(_ctrl_c_aborts)  # one is enough, however many runs this process stopped
    atexit.register(_ctrl_c_aborts)


def _ctrl_c_aborts() -> None:
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # an ignored Ctrl-C stays ignored
        signal.signal(signal.SIGINT, lambda signum, frame: _abort_training())


def _finished(cfg: TrainConfig, progress: dict) -> bool:
    """Whether the run trained its --epochs, or stopped early (--patience)."""
    return progress["epoch"] >= cfg.epochs or cfg.out_of_patience(progress)


def _how_to_go_on(cfg: TrainConfig, progress: dict, resume: str) -> str:
    """What resumes a run that stopped without finishing an epoch in this call (``resume``: the
    command that continues it as it is)."""
    if progress["epoch"] >= cfg.epochs:
        return f"it has finished its --epochs {cfg.epochs}; to train longer: {resume} --epochs {progress['epoch'] + 1}"
    if cfg.max_steps is not None and progress["step"] >= cfg.max_steps:
        return f"it has taken its --max-steps {cfg.max_steps}; to go on: {resume} --max-steps {2 * cfg.max_steps}"
    if _finished(cfg, progress):
        return (
            f"it stopped early (no better valid {cfg.select_by} for {progress['epochs_since_best']} epochs); "
            f"to go on: {resume} --patience {progress['epochs_since_best'] + cfg.patience}"
        )
    return f"continue with: {resume}"


def _load_run(args):
    from graphformer.training.checkpoint import BEST, LAST
    from graphformer.training.run import LoadedRun

    decoding = DecodeConfig(**given(args, DecodeConfig))
    backend = getattr(args, "attention_backend", TrainConfig.defaults()["attention_backend"])
    run = LoadedRun(args.run_dir, args.checkpoint, args.device, attention_backend=backend)
    asked = {"best": BEST, "last": LAST}.get(args.checkpoint)  # checkpoint.find falls back from one to the other
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

    from graphformer.training.evaluate import evaluate

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
        print(
            f"{args.split}: n={scores['n']} loss={scores['loss']:.4f} token_accuracy={scores['token_accuracy']:.4f} "
            f"exact_match={scores['exact_match']:.4f}{bleu}"
            + (f" (beam {decoding.beam})" if searched else "")
            + (f" in {decoding.precision}" if decoding.precision != "float32" else "")
        )
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


def cmd_translate(args) -> int:
    from tqdm.auto import tqdm

    from graphformer.data.batching import decoding_chunks
    from graphformer.decoding import translate_ids
    from graphformer.vocab import UNK

    run, decoding = _load_run(args)
    precision = _precision_context(decoding.precision, run.device)
    lines = read_input(args.input)
    if not lines:
        print(f"graphformer: warning: {args.input or 'standard input'} is empty; nothing to translate", file=sys.stderr)
    pool = run.model.make_pool()
    limit = run.model.cfg.max_len - pool.source_positions(0)  # </s> (and <cls>) take positions
    tokenize, detokenize = run.pipelines()
    src, unknown = [], {}
    for i, line in enumerate(lines, 1):
        tokens = tokenize(line)
        ids = run.src_vocab.encode(tokens)
        for token, id_ in zip(tokens, ids):
            if id_ == UNK:
                unknown[token] = unknown.get(token, 0) + 1
        if len(ids) > limit:
            print(
                f"graphformer: warning: line {i} has {len(ids)} tokens; translating its first {limit}", file=sys.stderr
            )
            ids = ids[:limit]
        src.append(ids)
    if unknown:
        listed = ", ".join(sorted(unknown, key=lambda t: (-unknown[t], t))[:10])
        print(
            f"graphformer: warning: {sum(unknown.values())} input tokens ({len(unknown)} distinct) are not in the "
            f"vocabulary and read as <unk>: {listed}{', ...' if len(unknown) > 10 else ''}",
            file=sys.stderr,
        )
    out = [""] * len(src)
    nonempty = [i for i, s in enumerate(src) if s]
    tic, tokens, written = time.perf_counter(), 0, 0
    try:
        with (
            tqdm(
                total=len(nonempty),
                unit="sentence",
                disable=args.quiet or sys.stdout.isatty() or not nonempty,
                file=sys.stderr,
            ) as bar,
            precision,
        ):
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
    seconds = max(time.perf_counter() - tic, 1e-9)
    if not args.quiet and nonempty:
        count = f"{len(nonempty)} sentence{'s' if len(nonempty) != 1 else ''}"
        print(
            f"translated {count} ({tokens} tokens) in {seconds:.1f} s: {len(nonempty) / seconds:.1f} sentences/s, "
            f"{tokens / seconds:.0f} tokens/s",
            file=sys.stderr,
        )
    return 0


def cmd_average(args) -> int:
    from graphformer.training import checkpoint
    from graphformer.training.average import average_path, choose, write_average
    from graphformer.training.config import SELECT_BY
    from graphformer.training.run_dir import RunDir

    run = RunDir(checkpoint.check_run_dir(args.run_dir))
    select_by = run.read_config()[1].get("select_by") or "loss"
    paths = choose(run, last=args.last, best=args.best, select_by=select_by, larger_is_better=SELECT_BY[select_by])
    replaced = average_path(run, args.output).exists()  # only ever an earlier average: write_average checks
    output = write_average(run, paths, args.output)
    print(
        f"wrote {output}{' (replacing the earlier average)' if replaced else ''}: the average of "
        f"{', '.join(p.stem for p in paths)}"
    )
    return 0


def _pick(record: dict, args):
    from graphformer.viz.recording import picture

    return picture(record, args.relation, args.layer, args.head)


def cmd_animate(args) -> int:
    from tqdm.auto import tqdm

    from graphformer.viz.plots import check_animation_path, draw_frames, write_animation
    from graphformer.viz.recording import load_records

    check_animation_path(args.output)
    records = load_records(args.run_dir)
    pictures = [_pick(r, args) for r in records]
    with (
        interrupts_between_steps() as check,
        tqdm(
            total=len(pictures), unit="frame", desc="drawing", file=sys.stderr, disable=not sys.stderr.isatty()
        ) as bar,
    ):
        frames = draw_frames(pictures, args.view, args.scale, after_frame=lambda: (check(), bar.update()))
    write_animation(frames, [p.title for p in pictures], args.output)  # atomic: an interrupt leaves no half file
    print(f"wrote {args.output}: {len(frames)} frames (epochs {records[0]['epoch']}..{records[-1]['epoch']})")
    return 0


@contextmanager
def interrupts_between_steps():
    """Within the block Ctrl-C is held until the next ``check()``, which raises it.

    Drawing makes and drops many matplotlib objects, whose weak-reference callbacks run at any
    moment; a KeyboardInterrupt raised inside one is printed as "Exception ignored" and lost, so
    the command would go on. Raised at a step boundary instead, it ends the command cleanly.
    Where Ctrl-C does not raise KeyboardInterrupt (SIGINT ignored or handled by someone else, or
    a thread other than the main one, which cannot set handlers) nothing changes.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield lambda: None
        return
    pending = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))

    def check():
        if pending:
            raise KeyboardInterrupt

    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)
    check()  # a Ctrl-C during the block's last step


def cmd_heatmap(args) -> int:
    from graphformer.viz.plots import check_image_path, draw, save_figure
    from graphformer.viz.recording import load_records

    check_image_path(args.output)
    records = load_records(args.run_dir)
    if args.epoch == "last":
        record = records[-1]
    else:
        chosen = [r for r in records if str(r["epoch"]) == args.epoch]
        if not chosen:
            raise UserError(
                f"epoch {args.epoch} was not recorded; recorded: {', '.join(str(r['epoch']) for r in records)}"
            )
        record = chosen[0]
    with interrupts_between_steps():  # a Ctrl-C while drawing ends the command before anything is written
        figure = draw(_pick(record, args), args.view, args.scale)
    save_figure(figure, args.output)
    print(f"wrote {args.output}")
    return 0


def _check_output_folder(output: str | None) -> None:
    if output is None:
        return
    if Path(output).is_dir():
        raise UserError(f"-o {output} is a folder; give the name of the file to write")
    parent = Path(output).resolve().parent
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist; create it first"
        raise UserError(f"-o {output}: {Path(output).parent} {what}")


# How a failed allocation reads in the errors of torch (CPU, CUDA, cuBLAS) and DGL, which raise
# RuntimeError or DGLError rather than MemoryError.
OUT_OF_MEMORY = (
    "can't allocate memory",
    "out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "bad_alloc",
    "Cannot allocate memory",
)


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: Python's, torch's or DGL's, on the CPU or a GPU."""
    return (
        isinstance(err, MemoryError)
        or type(err).__name__ == "OutOfMemoryError"
        or any(text in str(err) for text in OUT_OF_MEMORY)
    )


# How a collective reads when another process of the run has gone: gloo's socket errors, NCCL's.
LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "remote process exited")


def _lost_peer(err: BaseException) -> bool:
    """Whether ``err``, in one of several processes, is a collective that failed because another
    process of the run exited."""
    return "WORLD_SIZE" in os.environ and isinstance(err, RuntimeError) and any(t in str(err) for t in LOST_PEER)


def _say(text: str) -> None:
    """``graphformer: text`` on stderr in one write: a run's processes share the stream, and a line
    written in pieces could run into another process's. With several processes each reports its
    own error (it may be that one's alone); the ones past the first say their rank."""
    rank = os.environ.get("RANK", "0")
    sys.stderr.write(f"graphformer{'' if rank == '0' else f' (rank {rank})'}: {text}\n")
    sys.stderr.flush()


def main(argv=None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)  # the command `train --processes` runs in each process
    if unknown:
        parser.exit(
            2,
            f"{args.command_prog}: error: unrecognized arguments: {' '.join(unknown)}; "
            f"see {args.command_prog} --help\n",
        )
    try:
        _check_output_folder(getattr(args, "output", None))
        return args.func(args)
    except UserError as err:
        if os.environ.get("GRAPHFORMER_DEBUG"):
            raise
        _say("error: " + (f"{flag(err.name)} {err.problem}" if isinstance(err, ConfigError) else str(err)))
        return 2
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except BrokenPipeError:  # the reader of stdout left (| head): stop quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # a file or folder the system refused: read-only, no permission, not a folder
        if os.environ.get("GRAPHFORMER_DEBUG"):
            raise
        from graphformer.files import REFUSED

        where = f"{err.filename}: " if err.filename else ""
        if err.errno in REFUSED and err.errno not in (errno.EACCES, errno.EPERM):  # only ever a write's
            what, remedy = REFUSED[err.errno]
            _say(f"error: {where}{what} ({err.strerror or err}); {remedy}, then run the command again")
        else:
            _say(f"error: {where}{err.strerror or err}; check the path and its permissions")
        return 2
    except Exception as err:  # MemoryError, or torch's and DGL's allocation failures
        if _lost_peer(err) and not os.environ.get("GRAPHFORMER_DEBUG"):
            from graphformer.training.launch import LOST_PEER_STATUS

            _say(f"error: another process of this run stopped, and this one cannot go on without it ({err})")
            return LOST_PEER_STATUS
        if os.environ.get("GRAPHFORMER_DEBUG") or not _out_of_memory(err):
            raise
        _say(
            "error: out of memory; ask for less at once (a smaller --beam, --batch-size or --batch-tokens, a shorter "
            "--max-len, a smaller model)"
        )
        return 2
