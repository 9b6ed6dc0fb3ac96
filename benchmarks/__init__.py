"""Speed and memory measurements of graphformer, each against what it competes with.

Run one from the repository root as a module: ``python -m benchmarks.NAME [--help]`` (``make
bench`` runs the published ones; results go to ``benchmarks/results/``). How they measure, and
their headline figures with their commands: ``docs/results.md``.

The benchmarks: ``sparse_attention``, ``flex_attention``, ``training_throughput``, ``edge_cost``,
``threads``, ``decoding``, ``precision``, ``tile_kernels``, ``sample_graphs``, ``syncs`` and
``gpu_check`` (``make gpu-check``); ``flex_cpu_dynamic_shapes`` reproduces a torch bug. What they
share: ``harness`` (the interleaved best-of timing loop, the result writer), ``peers`` (the dense
models they are compared with), ``recipe`` (the Multi30k CPU recipe's sizes), ``decoders``,
``inline_step`` and ``decoding_multi30k`` (decoding's parts), ``gpu_stages`` and ``gpu_training``
(the GPU check's).
"""
