"""``graphformer average``: the mean of a run's kept epoch checkpoints."""

from __future__ import annotations


def cmd_average(args) -> int:
    from graphformer.training.average import average_path, choose, write_average
    from graphformer.training.config import SELECT_BY
    from graphformer.training.run_dir import RunDir, check_run_dir

    run = RunDir(check_run_dir(args.run_dir))
    select_by = run.read_config()[1].get("select_by") or "loss"
    paths = choose(run, last=args.last, best=args.best, select_by=select_by, larger_is_better=SELECT_BY[select_by])
    replaced = average_path(run, args.output).exists()  # only ever an earlier average: write_average checks
    output = write_average(run, paths, args.output)
    print(
        f"wrote {output}{' (replacing the earlier average)' if replaced else ''}: the average of "
        f"{', '.join(p.stem for p in paths)}"
    )
    return 0
