"""The parser of the ``graphformer`` command: its subcommands and their options.

The options of ``train`` (and the decoding options) are built from the config dataclasses'
fields (`graphformer.config_io`): one default, help text and list of choices each; the other
lists it offers come from `graphformer.choices`. Nothing here imports torch, DGL or matplotlib,
so ``--help`` and argument errors are instant.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

from graphformer.choices import ANIMATION_FORMATS, IMAGE_FORMATS, SCALES, SUBLAYERS, VIEWS, pattern_syntax
from graphformer.data.tasks import EVALUATION_SPLITS
from graphformer.errors import did_you_mean
from graphformer.invocation import NAME, invoked_as
from graphformer.model.config import ModelConfig
from graphformer.training.config import DEVICES, PER_PROCESS, RESUME_OVERRIDES, RUNTIME, DecodeConfig, TrainConfig


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
    abbreviated options (``--epoch 2`` must not quietly mean ``--epochs 2``), the closest choice
    to a misspelt one, and defaults shown."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, formatter_class=_ShowDefaults, **kwargs)

    def error(self, message):
        """``graphformer train: error: ...``, as every error of the command begins, and the help to
        read, as the user started the command (`invoked_as`: ``.venv/bin/graphformer train --help``)."""
        command = self.prog.replace(NAME, invoked_as(), 1)
        self.exit(2, f"{self.prog}: error: {message}; see {command} --help\n")

    def _check_value(self, action, value):
        """argparse's check of a value against an option's choices (and of a subcommand's name),
        with the choice it was likely meant to be."""
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(str, action.choices))
            message = f"invalid choice: {value!r}{did_you_mean(value, action.choices)}; choose from {choices}"
            raise argparse.ArgumentError(action, message)


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
        help_text = help_text() if callable(help_text) else help_text  # lists of registry entries, plugins' too
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
        f"Names: {pattern_syntax()}.",
    )
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory for checkpoints, logs and vocabulary")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its last checkpoint, with "
        f"its saved configuration (only {_flags(RESUME_OVERRIDES)}, how it runs: {_flags(RUNTIME)}, and "
        f"{_flags(PER_PROCESS)} on another number of processes, keeping accumulate x processes, may change)",
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
        "on CPUs; NCCL on GPUs, one each): each step takes every process's batches, so N processes make "
        "1/N as many steps per epoch; Ctrl-C stops them all after the same step, with a checkpoint",
    )
    add_config_options(p.add_argument_group("model"), ModelConfig)
    add_config_options(p.add_argument_group("training"), TrainConfig)


def _flags(names) -> str:
    return ", ".join(flag(name) for name in names)


def _eval_parser(sub):
    p = sub.add_parser(
        "evaluate",
        help="score a trained model on a split",
        description="Loss, token accuracy and exact match (and BLEU for translation) of a run's model on a data split.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument(
        "--split",
        default="test",
        choices=EVALUATION_SPLITS,
        help="the split to score (multi30k: also its test sets by name; test is test_2016_flickr)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="score the split of this folder ({split}.src, {split}.tgt, "
        "tokenized as the run's own data folder) instead of the run's own data, e.g. longer samples of "
        "the same task (no BLEU)",
    )
    _decoding_options(p)


def _translate_parser(sub):
    p = sub.add_parser(
        "translate",
        help="decode input lines with a trained model",
        description="Read one sentence per line (stdin or --input), write one decoded line each.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--input", metavar="FILE", help="file to read instead of standard input")
    _edges_option(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar and no throughput line (warnings stay)")
    _decoding_options(p)


CHECKPOINT_HELP = (
    "best, last, averaged (see graphformer average) or a checkpoint file; best and last "
    "stand in for each other while a run has only one of them"
)


def _edges_option(p):
    p.add_argument(
        "--edges",
        metavar="FILE",
        help="each input line's own encoder edges, one line of key-query pairs per input line "
        "(for a run trained with --enc-attention ...edges; parse-tree is derived from the input)",
    )


def _decoding_options(p):
    add_config_options(p, DecodeConfig)
    p.add_argument("--checkpoint", default="best", metavar="WHICH", help=CHECKPOINT_HELP)
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


def _top(text: str) -> int:
    """--top K: a count of keys, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of keys of at least 1, got {text!r}")
    return int(text)


TOP_HELP = "draw each query's K strongest keys alone (a view that reads at thousands of tokens)"


def _viz_options(p) -> argparse._MutuallyExclusiveGroup:
    """The options animate and heatmap share; returns the group of --view (heatmap adds --graph)."""
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run trained with --viz-every N")
    p.add_argument(
        "--relation",
        choices=SUBLAYERS,
        help="enc: source -> source, dec: decoder inputs -> decoder inputs, cross: source -> decoder inputs "
        "(default: cross; enc for an encoder classifier, which has no other)",
    )
    p.add_argument("--layer", type=int, default=-1, help="layer index (negative counts from the last)")
    p.add_argument("--head", type=_head, default=0, metavar="N|all", help="head index, or all: one panel per head")
    p.add_argument("--top", type=_top, metavar="K", help=TOP_HELP)
    p.add_argument(
        "--scale",
        choices=SCALES,
        default="shared",
        help="colour scale: shared (0 to 1 in every panel) or per-head (0 to each panel's largest weight)",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--view",
        choices=VIEWS,
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
        f"GIF for {ANIMATION_FORMATS[0]}, a self-contained HTML player for "
        f"{ANIMATION_FORMATS[1]}.",
    )
    _viz_options(p)


def _heatmap_parser(sub):
    p = sub.add_parser(
        "heatmap",
        help="draw one recorded attention map",
        description="A heatmap (or, with --graph, the bipartite attention graph) of one recorded "
        f"epoch, as {', '.join(IMAGE_FORMATS[:-1])} or {IMAGE_FORMATS[-1]}.",
    )
    view = _viz_options(p)
    p.add_argument("--epoch", default="last", help="recorded epoch number (0: untrained), or 'last'")
    view.add_argument("--graph", dest="view", action="store_const", const="graph", help="same as --view graph")


def _attend_parser(sub):
    p = sub.add_parser(
        "attend",
        help="draw the attention of a trained model on input lines",
        description="Decode each input line with a run's model and draw the maps of every sub-layer, layer and "
        "head it attended with: a picture per line (a grid of layers by heads per sub-layer; several "
        "lines write -o with the line's index before the suffix, x.0.png, x.1.png) or an offline HTML page with "
        "an overview of every head and a head view. A classifier's title shows its label, a translation's "
        "the output it attended with.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--input", action="append", metavar="TEXT", help="an input line (repeatable)")
    given.add_argument("--input-file", metavar="FILE", help="a text file of input lines, one per line")
    _edges_option(p)
    p.add_argument("--sublayer", choices=SUBLAYERS, help="draw this sub-layer only (default: every one the model has)")
    p.add_argument(
        "--layer",
        type=int,
        metavar="N",
        help="draw this layer only, or a universal model's ACT step (from 0; negative counts from the last)",
    )
    p.add_argument("--head", type=int, metavar="N", help="draw this head only (from 0)")
    p.add_argument(
        "--show",
        choices=("attention", "rollout", "flow"),
        default="attention",
        help="the maps (attention), or how much each input token reaches each query through the layers: "
        "rollout or flow, a heatmap (and the shares on a sample's own graph); --layer: compose up to it",
    )
    p.add_argument(
        "--query", type=int, metavar="N", help="rollout or flow: this query node's row only, the one the graph colours"
    )
    p.add_argument("--top", type=_top, metavar="K", help=TOP_HELP)
    p.add_argument("-o", "--output", help=f"picture ({', '.join(IMAGE_FORMATS)}) or page (.html) to write")
    p.add_argument("--save-maps", metavar="FILE.pt", help="also save the maps, tokens and outputs with torch.save")
    add_config_options(p, DecodeConfig, skip=["batch_tokens", "precision"])
    p.add_argument("--checkpoint", default="best", metavar="WHICH", help=CHECKPOINT_HELP)
    p.add_argument("--device", default="cpu", help=DEVICES)
    add_config_options(p, TrainConfig, skip=[f.name for f in fields(TrainConfig) if f.name != "attention_backend"])


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; ``args.command`` names the subcommand parsed."""
    return _build()[0]


def parse_command_line(argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed (``sys.argv[1:]`` when None); an argument that is none of its command's
    is a one-line error, with the option it was likely meant to be, that points to the command's
    own ``--help``. (The top parser finds such arguments, so its own error would name its help.)"""
    parser, commands = _build()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = commands[args.command]
        options = [option for action in command._actions for option in action.option_strings]
        flags = [word.partition("=")[0] for word in unknown if word.startswith("-")]
        hint = did_you_mean(flags[0], options) if flags else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one subcommand (``train``, ``heatmap``, ...): its ``description``, its
    ``format_help()``."""
    return _build()[1][command]


def option_help(command: str, option: str) -> str:
    """The help text of ``option`` (``--task``) of ``command``, before ``--help`` adds its default."""
    return next(action.help for action in command_parser(command)._actions if option in action.option_strings)


def _build() -> tuple[argparse.ArgumentParser, dict]:
    """The parser, and the parser of each subcommand by name."""
    parser = _Parser(prog=NAME, description="The Transformer as message passing on graphs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for add in (
        _train_parser,
        _eval_parser,
        _translate_parser,
        _average_parser,
        _animate_parser,
        _heatmap_parser,
        _attend_parser,
    ):
        add(sub)
    for command in sub.choices.values():
        command.add_argument(
            "--plugin",
            action="append",
            default=[],
            metavar="MODULE",
            help="import this module first: it registers its own backends, patterns, sample terms, tasks or "
            "models (docs/howto/extend.md); a run records it for evaluate, translate and --resume (repeatable)",
        )
    return parser, dict(sub.choices)
