"""``graphformer attend``: the attention maps of a trained run on input lines the user gives."""

from __future__ import annotations

from graphformer.errors import UserError


def cmd_attend(args) -> int:
    from graphformer.cli.decode import _load_run, _warn_about_input, input_lines, write_attended
    from graphformer.decoding.inputs import source_limit
    from graphformer.viz.attend_views import check_maps_path, check_output, write
    from graphformer.viz.on_demand import attend_lines, check_choice, check_steps, encode_inputs

    if args.show != "attention":
        from graphformer.cli.rollout import cmd_rollout

        return cmd_rollout(args)
    if args.query is not None:
        raise UserError("--query picks a row of rollout or flow; give --show rollout or --show flow")
    if args.output is None and args.save_maps is None:
        raise UserError("nothing to write; give -o FILE (a picture or .html page) or --save-maps FILE.pt")
    if args.output is not None:
        check_output(args.output)  # before the model loads: a wrong suffix is said at once
    if args.save_maps is not None:
        check_maps_path(args.save_maps)
    run, decoding = _load_run(args)
    sublayers = check_choice(run, args.sublayer, args.layer, args.head)
    source, edges = encode_inputs(run, input_lines(args), args.edges)
    _warn_about_input(source, source_limit(run.model, run.model.make_pool()))  # unknown tokens, as translate
    results = attend_lines(run, source, edges, sublayers, decoding.beam, decoding.alpha)
    check_steps(results, args.layer)  # a universal model's step past where an input's tokens all halted
    write_attended(results, args.output, args.save_maps, lambda r, out: write(r, out, args.layer, args.head, args.top))
    return 0
