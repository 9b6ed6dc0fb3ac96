"""On a CUDA machine (skipped elsewhere): attention, training and decoding on the GPU against
the edge-wise kernels on the CPU (DGL's where it is installed; the relations carry everything
to the GPU, so no CUDA build of DGL is needed).
``make gpu-check`` runs these and benchmarks/gpu_check.py."""

import pytest
import torch
from helpers import TINY_MODEL, random_pairs, reference_backend, small_copy_data

from graphformer import make_model
from graphformer.attention import BACKENDS, dgl_ops, unavailable
from graphformer.decoding import translate_ids
from graphformer.graphs import CROSS, DEC, ENC, GraphPool, make_batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")]
GPU_BACKENDS = ["auto", "torch", "padded", "blocked"] + (
    ["dgl"] if torch.cuda.is_available() and dgl_ops.runs_on(torch.device("cuda")) else []
)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("enc", ["full", "window:2+global:1", "tree:1"])
def test_attention_on_the_gpu_equals_the_edgewise_kernels_on_the_cpu(backend, enc):
    src, tgt = random_pairs(6, 30, max_len=20)
    cpu = make_batch(GraphPool(enc), src, tgt)
    gpu = cpu.to("cuda")
    for etype in (ENC, DEC, CROSS):
        rel_cpu, rel_gpu = cpu.relation(etype), gpu.relation(etype)
        gen = torch.Generator().manual_seed(0)
        q, k, v = (
            torch.randn(n, 2, 8, dtype=torch.float64, generator=gen)
            for n in (rel_cpu.num_queries, rel_cpu.num_keys, rel_cpu.num_keys)
        )
        ref = BACKENDS[reference_backend()](rel_cpu, q, k, v)
        out = BACKENDS[backend](rel_gpu, q.cuda(), k.cuda(), v.cuda())
        torch.testing.assert_close(out.cpu(), ref, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", ["transformer", "universal"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_training_step_and_decoding_on_the_gpu_equal_the_cpu(kind, backend):
    extra = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(25, d_model=16, heads=2, d_ff=32, dropout=0.0, **extra).double()
    src, tgt = random_pairs(6, 25, max_len=12, seed=5)
    pool = model.make_pool()
    results = []
    for device, name in (("cpu", reference_backend()), ("cuda", backend)):
        model.to(device).attention_backend = name
        model.zero_grad()
        batch = make_batch(pool, src, tgt).to(device)
        out = model(batch)
        (-out.gather(1, batch.gold[:, None]).sum()).backward()
        hyps = translate_ids(model, src, beam=2, extra_len=3)
        results.append(
            (
                out.detach().cpu(),
                [p.grad.cpu() for p in model.parameters() if p.grad is not None],
                [h.tokens for h in hyps],
            )
        )
    (out_cpu, grads_cpu, hyps_cpu), (out_gpu, grads_gpu, hyps_gpu) = results
    torch.testing.assert_close(out_gpu, out_cpu, atol=1e-9, rtol=0)
    for a, b in zip(grads_gpu, grads_cpu):
        torch.testing.assert_close(a, b, atol=1e-8, rtol=0)
    assert hyps_gpu == hyps_cpu


@pytest.mark.parametrize("kind", ["transformer", "universal"])
@pytest.mark.parametrize("precision", ["autocast-float16", "autocast-bfloat16", "bfloat16"])
def test_decoding_in_lower_precision_on_the_gpu_stays_near_float32(kind, precision):
    """As on the CPU (tests/decoding/test_decoding.py), with float16 too."""
    from helpers import low_precision_drift

    drift, step_change, cache_dtype = low_precision_drift(kind, precision, device="cuda")
    assert cache_dtype == getattr(torch, precision.split("-")[-1])
    assert drift < 0.1 < step_change / 2


def test_cli_trains_and_translates_on_cuda(tmp_path, capsys):
    from graphformer.cli import main

    data = small_copy_data(tmp_path / "data", n_train=64)
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "parallel",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--device",
                "cuda",
                "--epochs",
                "1",
                "--batch-size",
                "16",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    assert main(["evaluate", str(run), "--split", "test", "--device", "cuda", "--json"]) == 0
    assert main(["evaluate", str(run), "--split", "test", "--device", "cuda", "--precision", "float16", "--json"]) == 0
    assert '"precision": "float16"' in capsys.readouterr().out


TRAIN_BACKENDS = GPU_BACKENDS + (["flex"] if not unavailable("flex") else [])
# Relative distance of a training step's loss and gradients from the float64 one on the CPU:
# float32 rounds at about 1e-7 per operation, bfloat16 products at about 4e-3.
STEP_TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}


def _training_step(model, batch, precision: str, device: str):
    """(loss, gradients) of one label-smoothed step of ``model`` on ``batch``, on ``device``."""
    from graphformer.evaluation.loss import label_smoothed_nll
    from graphformer.precision import autocast

    model.zero_grad()
    batch = batch.to(device)
    with autocast(precision, device):
        loss = label_smoothed_nll(model(batch), batch.gold, 0.1) / len(batch.gold)
    loss.backward()
    return loss.detach().double().cpu(), [p.grad.double().cpu() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("backend", TRAIN_BACKENDS)
def test_training_steps_in_float32_and_bfloat16_on_the_gpu_stay_near_float64(backend, precision):
    """blocked's tiles start at 1024 queries: the batch has more target nodes than that."""
    model = make_model(30, layers=2, d_model=32, heads=4, d_ff=64, dropout=0.0)
    src, tgt = random_pairs(64, 30, max_len=40, seed=3)
    batch = make_batch(model.make_pool(), src, tgt)
    assert len(batch.tgt_tokens) >= 1024
    model.double().attention_backend = reference_backend()
    ref_loss, ref_grads = _training_step(model, batch, "float32", "cpu")
    model.float().to("cuda").attention_backend = backend
    loss, grads = _training_step(model, batch, precision, "cuda")
    tol = STEP_TOLERANCE[precision]
    assert abs(loss - ref_loss) <= tol * abs(ref_loss)
    for g, ref in zip(grads, ref_grads):
        assert torch.isfinite(g).all() and (g - ref).norm() <= tol * ref.norm() + 1e-6


@pytest.mark.parametrize("resume_on", ["cuda", "cpu"])
def test_a_run_stopped_on_the_gpu_resumes_on_the_gpu_exactly_and_on_the_cpu(tmp_path, resume_on):
    from helpers import assert_same_last_weights, read_jsonl, train_straight_and_interrupted

    from graphformer.cli import main
    from graphformer.training import checkpoint
    from graphformer.training.run_dir import LAST

    data = small_copy_data(tmp_path / "data", n_train=64)
    common = [
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--device",
        "cuda",
        *TINY_MODEL,
    ]
    if resume_on == "cuda":  # the same device: the resumed run is the straight one, bit for bit
        straight, stopped = train_straight_and_interrupted(tmp_path, common, stop_at=3)
        assert_same_last_weights(straight, stopped)
        return
    stopped = tmp_path / "stopped"
    assert main(["train", *common, "--out", str(stopped), "--max-steps", "3"]) == 0
    assert main(["train", "--out", str(stopped), "--resume", "--device", "cpu", "--max-steps", "1000", "--quiet"]) == 0
    steps = read_jsonl(stopped / "steps.jsonl")
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1)) and len(steps) > 3
    state = checkpoint.load(stopped / LAST)["model"]
    assert {t.device.type for t in state.values()} == {"cpu"}


@pytest.mark.parametrize("kind", ["transformer", "universal"])
def test_incremental_decoding_on_the_gpu_equals_recomputing_the_prefix(kind):
    extra = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(25, d_model=16, heads=2, d_ff=32, dropout=0.0, **extra).double().cuda().eval()
    src, _ = random_pairs(6, 25, max_len=12, seed=7)
    for beam in (1, 3):
        incremental = translate_ids(model, src, beam=beam, extra_len=5)
        recomputed = translate_ids(model, src, beam=beam, extra_len=5, incremental=False)
        assert [h.tokens for h in incremental] == [h.tokens for h in recomputed]


def test_viz_every_records_attention_while_training_on_the_gpu(tmp_path):
    from graphformer.cli import main

    data = small_copy_data(tmp_path / "data", n_train=64)
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "parallel",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--device",
                "cuda",
                "--epochs",
                "2",
                "--batch-size",
                "16",
                "--viz-every",
                "1",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    assert len(list((run / "attention").glob("epoch_*.pt"))) == 3  # the untrained model, then each epoch
    assert main(["heatmap", str(run), "--relation", "cross", "-o", str(tmp_path / "cross.png")]) == 0


@pytest.mark.skipif(bool(unavailable("flex")), reason=str(unavailable("flex")))
@pytest.mark.parametrize("kind", ["t5", "alibi", "shaw"])
@pytest.mark.parametrize("etype", [ENC, CROSS])
def test_flex_adds_position_biases_with_their_gradients_on_the_gpu(kind, etype):
    """flex's score_mod (graphformer/attention/flex_bias.py) in float32 on CUDA, against the torch
    backend in float64 on the CPU: outputs and the gradients of q, k, v and the bias's table (T5's
    per-bucket table, Shaw's relative keys behind a per-query table)."""
    import math

    from graphformer.attention import EdgeBias, graph_attention
    from graphformer.graphs.edge_types import Distance, Relative, T5Buckets

    src, tgt = random_pairs(8, 30, max_len=40, seed=7)
    cpu = make_batch(GraphPool("window:4+global:1"), src, tgt)
    relations = {"cpu": cpu.relation(etype), "cuda": cpu.to("cuda").relation(etype)}
    gen = torch.Generator().manual_seed(0)
    nq, nk = relations["cpu"].num_queries, relations["cpu"].num_keys
    q, k, v = (torch.randn(n, 2, 8, dtype=torch.float64, generator=gen) for n in (nq, nk, nk))
    table, keys = torch.randn(8, 2, dtype=torch.float64, generator=gen), torch.randn(5, 2, 8, dtype=torch.float64)
    g = torch.randn(nq, 2, 8, dtype=torch.float64, generator=gen)
    results = []
    for device, dtype, backend in (("cpu", torch.float64, "torch"), ("cuda", torch.float32, "flex")):
        leaves = [t.to(device, dtype).requires_grad_() for t in (q, k, v, table, keys)]
        if kind == "t5":
            bias = EdgeBias(T5Buckets(8, 20), table=leaves[3])
        elif kind == "alibi":
            bias = EdgeBias(Distance(), slopes=-torch.tensor([0.5, 0.25], dtype=dtype, device=device))
        else:
            bias = EdgeBias(Relative(2), table=torch.einsum("ihd,thd->iht", leaves[0], leaves[4]) / math.sqrt(8))
        out = graph_attention(relations[device], *leaves[:3], backend, bias=bias)
        grads = torch.autograd.grad(out, leaves, g.to(device, dtype), allow_unused=True)
        results.append([out.detach().double().cpu()] + [None if x is None else x.double().cpu() for x in grads])
    for got, want in zip(results[1], results[0]):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
