"""``graphformer animate`` and ``graphformer heatmap``: pictures of the attention maps a run recorded."""

from __future__ import annotations

import sys

from graphformer.cli.signals import interrupts_between_steps
from graphformer.errors import UserError


def _pick(record: dict, args):
    from graphformer.viz.recording import picture

    return picture(record, args.relation, args.layer, args.head, args.top)


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
