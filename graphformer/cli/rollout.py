"""``graphformer attend --show rollout|flow``: how much each input token reaches each query of a
trained run's model through its layers, on input lines the user gives (`graphformer.viz.rolled`),
drawn by `graphformer.viz.rollout_views`."""

from __future__ import annotations

from graphformer.errors import UserError


def cmd_rollout(args) -> int:
    from graphformer.cli.decode import _load_run, _warn_about_input, input_lines, write_attended
    from graphformer.decoding.inputs import source_limit
    from graphformer.viz.attend_views import check_maps_path
    from graphformer.viz.on_demand import check_choice, encode_inputs
    from graphformer.viz.rolled import rollout_lines
    from graphformer.viz.rollout_views import check_picture_path, write

    if args.output is None and args.save_maps is None:
        raise UserError(f"nothing to write; give -o FILE (a picture) or --save-maps FILE.pt with --show {args.show}")
    if args.head is not None:
        raise UserError(f"--head {args.head}: {args.show} averages the heads of each layer; leave --head out")
    if args.top is not None:
        raise UserError(
            f"--top {args.top}: {args.show} draws each query's shares of every input token; leave --top out"
        )
    if args.output is not None:
        check_picture_path(args.output)  # before the model loads: a wrong suffix is said at once
    if args.save_maps is not None:
        check_maps_path(args.save_maps)
    run, decoding = _load_run(args)
    sublayer = args.sublayer or ("enc" if run.model.cfg.classifies else "cross")
    check_choice(run, sublayer, args.layer, None)
    source, edges = encode_inputs(run, input_lines(args), args.edges)
    _warn_about_input(source, source_limit(run.model, run.model.make_pool()))
    results = rollout_lines(
        run, source, edges, sublayer, args.show, args.query, args.layer, decoding.beam, decoding.alpha
    )
    write_attended(results, args.output, args.save_maps, write)
    return 0
