import random


def random_pairs(n_samples, vocab, max_len=40, seed=0):
    """Source/target id sequences, source lengths 1..max_len, target lengths 0..max_len-1."""
    rng = random.Random(seed)
    src = [[rng.randrange(4, vocab) for _ in range(rng.randint(1, max_len))] for _ in range(n_samples)]
    tgt = [[rng.randrange(4, vocab) for _ in range(rng.randint(0, max_len - 1))] for _ in range(n_samples)]
    return src, tgt


TINY_MODEL = ["--layers", "1", "--d-model", "32", "--heads", "4", "--d-ff", "64", "--quiet"]


def train_tiny(data, run, *options, layers=True):
    """``run``, trained by the command line on ``data`` with `TINY_MODEL` (without ``--layers`` where
    ``layers`` is False: a universal model has steps instead) and ``options``."""
    from graphformer.cli import main

    model = TINY_MODEL if layers else TINY_MODEL[2:]
    assert main(["train", "--data-dir", str(data), "--out", str(run), "--batch-size", "16", *model, *options]) == 0
    return run


def small_copy_data(path, n_train=240, seed=1):
    from graphformer.data import synthetic

    return synthetic.write_task("copy", path, seed=seed, sizes={"train": n_train, "valid": 40, "test": 40})


def small_recall_data(path, seed=1):
    """Associative recall of 8-12 tokens (4 values: chance 25 %), for the encoder classifier."""
    from graphformer.data import recall

    return recall.write_recall(
        path,
        seed=seed,
        sizes={"train": 160, "valid": 30, "test": 30},
        min_length=8,
        max_length=12,
        num_keys=6,
        num_values=4,
    )


TYPE_NAMES = "self\nnext\nparent\n"  # enc.types of `write_typed_edges`: "parent" is named but never used


def typed_line(n):
    """Typed pairs over n tokens and </s>: each node reads itself (by name) and its successor reads it (by id 1)."""
    return " ".join([f"{i}-{i}:self" for i in range(n + 1)] + [f"{i}-{i + 1}:1" for i in range(n)])


def write_typed_edges(data):
    """``enc.types`` (`TYPE_NAMES`) and ``{split}.enc.edges`` of `typed_line`s beside a parallel task's data."""
    (data / "enc.types").write_text(TYPE_NAMES)
    for split in ("train", "valid", "test"):
        lines = (data / f"{split}.src").read_text().splitlines()
        (data / f"{split}.enc.edges").write_text("".join(typed_line(len(s.split())) + "\n" for s in lines))
    return data


def lra_format(source):
    """``source``, a bracketed expression such as ``[MAX 2 9 ]``, as the Long Range Arena's ListOps
    generator writes it: an operator and its k arguments are the left-nested pairs
    ``((([MAX, 2), 9), ])``, each pair written ``( left right )``, so ``( ( ( [MAX 2 ) 9 ) ] )``.
    Written here from LRA's description, independently of graphformer's parser."""
    tokens = iter(source.split())

    def expression(token):
        if not token.startswith("["):
            return token
        written = token
        for argument in tokens:
            if argument == "]":
                return f"( {written} ] )"
            written = f"( {written} {expression(argument)} )"
        raise ValueError(f"{source!r} is not closed")

    return " ".join(expression(token) for token in tokens)


def snapshot(folder):
    """Every file under ``folder`` and its bytes: equal before and after a refused command."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def read_jsonl(path):
    import json

    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


def train_straight_and_interrupted(root, common, stop_at=7):
    """Train the ``common`` options once straight through (``root/straight``) and once stopped
    after ``stop_at`` steps, then resumed to the end (``root/stopped``); returns both run folders."""
    from graphformer.cli import main

    straight, stopped = root / "straight", root / "stopped"
    assert main(["train", *common, "--out", str(straight)]) == 0
    assert main(["train", *common, "--out", str(stopped), "--max-steps", str(stop_at)]) == 0
    assert read_jsonl(stopped / "steps.jsonl")[-1]["step"] == stop_at
    assert main(["train", "--out", str(stopped), "--resume", "--max-steps", "1000", "--quiet"]) == 0
    return straight, stopped


def assert_same_last_weights(run_a, run_b):
    """The two runs' last checkpoints hold bit-identical weights."""
    from graphformer.training import checkpoint
    from graphformer.training.run_dir import LAST

    a = checkpoint.load(run_a / LAST)["model"]
    b = checkpoint.load(run_b / LAST)["model"]
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def low_precision_drift(kind, precision, device="cpu"):
    """How far a model run in lower precision drifts from float32, against how far its
    log-probabilities move from one target position to the next: (drift, step_change).

    ``precision``: "bfloat16" (the model converted) or "autocast-bfloat16" / "autocast-float16"
    (float32 weights under ``torch.autocast``). Drift is the largest gap in log-probability, over
    the model's teacher-forced output and incremental decoding forced along the same targets,
    from the float32 model's teacher-forced output; the cache's dtype comes back too.
    """
    import contextlib

    import torch

    from graphformer import make_model
    from graphformer.decoding import IncrementalStepper
    from graphformer.graphs import make_batch
    from graphformer.vocab import SOS

    torch.manual_seed(0)
    extra = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(23, d_model=32, heads=4, d_ff=64, dropout=0.0, **extra).eval().to(device)
    src, tgt = random_pairs(12, 23, max_len=12, seed=3)
    pairs = [(s, t[:5]) for s, t in zip(src, tgt) if len(t) >= 5]  # the stepper steps every row alike
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    pool = model.make_pool()
    with torch.no_grad():
        reference = model(make_batch(pool, src, tgt).to(device)).view(len(src), 6, -1)
        if precision == "bfloat16":
            model.to(torch.bfloat16)
        dtype = getattr(torch, precision.split("-")[-1])
        context = torch.autocast(device, dtype=dtype) if precision.startswith("autocast") else contextlib.nullcontext()
        with context:
            forced = model(make_batch(pool, src, tgt).to(device)).view(len(src), 6, -1)
            stepper = IncrementalStepper(model, make_batch(pool, src).to(device), 1, 6, pool)
            inputs = torch.tensor([[SOS] + t for t in tgt], device=device)
            stepped = torch.stack([stepper.step(inputs[:, j]) for j in range(6)], 1)
    drift = max(float((out.float() - reference).abs().max()) for out in (forced, stepped))
    step_change = float((reference[:, 1:] - reference[:, :-1]).abs().amax(-1).min())
    return drift, step_change, stepper.cache.dtype


def dgl_missing():
    """Why DGL cannot be used on this stack (the current one has none), or None."""
    from graphformer.graphs.heterograph import dgl_missing as missing

    return missing()


def needs_dgl(test):
    """Skip ``test`` where DGL cannot be imported, saying why."""
    import pytest

    return pytest.mark.skipif(bool(dgl_missing()), reason=f"needs DGL (reference stack): {dgl_missing()}")(test)


def why_not(name, *, grad=False, float64=False):
    """Why these tests cannot run backend ``name`` here (on the CPU), or None: the installed stack
    lacks it, or the test needs gradients or float64, which ``flex`` does not compute on a CPU."""
    from graphformer.attention import unavailable

    if unavailable(name):
        return unavailable(name)
    if name == "flex" and grad:
        return "flex has no backward pass on the CPU (it trains on CUDA only)"
    if name == "flex" and float64:
        return "flex computes in float32, bfloat16 or float16"
    return None


def backends(*names, grad=False, float64=False):
    """``names`` as pytest parameters, each skipped (with the reason) where this stack cannot run it
    as the test needs (`why_not`)."""
    import pytest

    reasons = {n: why_not(n, grad=grad, float64=float64) for n in names}
    return [pytest.param(n, marks=pytest.mark.skipif(bool(reasons[n]), reason=str(reasons[n]))) for n in names]


def reference_backend() -> str:
    """The edge-wise kernels the other backends are checked against: DGL's where it is
    installed, else the same message passing in PyTorch."""
    return "torch" if dgl_missing() else "dgl"


def import_dgl():
    """The dgl module, or the calling test skipped where it cannot be imported."""
    import pytest

    if dgl_missing():
        pytest.skip(f"needs DGL (reference stack): {dgl_missing()}")
    import dgl

    return dgl


def runnable(names=None, *, grad=False, float64=False) -> list:
    """The backends (of ``names``, default all) that this stack can run as the test needs
    (`why_not`), in sorted order."""
    from graphformer.attention import BACKENDS

    return [n for n in sorted(names or BACKENDS) if not why_not(n, grad=grad, float64=float64)]


def refused_training(tmp_path, backend: str, prelude: str = "") -> str:
    """``graphformer train --attention-backend BACKEND`` on a small copy task, in a fresh process
    that first runs ``prelude``: asserts one line on stderr, exit 2 and no run folder; returns the line."""
    import subprocess
    import sys

    data = small_copy_data(tmp_path / "data", n_train=40)
    run = tmp_path / "run"
    probe = (
        f"import sys\n{prelude}\nfrom graphformer.cli import main\n"
        f"sys.exit(main(['train', '--task', 'copy', '--data-dir', {str(data)!r}, '--out', {str(run)!r}, "
        f"'--attention-backend', {backend!r}, '--device', 'cpu', '--quiet']))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert not run.exists() or not any(run.iterdir())
    return lines[0]


def recorded_dense(record):
    """{sub-layer: (layers, heads, queries, keys)} of a recorded epoch (kept as edges), dense: NaN where no edge."""
    from graphformer.viz.recording import recorded_maps

    return {sublayer: maps.dense() for sublayer, maps in recorded_maps(record).items()}


def saved_dense(path):
    """The inputs ``attend --save-maps`` saved to ``path`` (maps kept as edges), each one's maps dense."""
    from graphformer.viz.attend_views import load_maps

    return [{**saved, "maps": {s: maps.dense() for s, maps in saved["maps"].items()}} for saved in load_maps(path)]


def long_listops_data(folder):
    """Short ListOps (8-40 tokens) in ``folder``, with one expression of about 2,000 tokens put first
    in valid, so that ``--viz-every`` records it; (the data folder, that expression)."""
    from graphformer.data.listops import generate_listops, write_listops

    data = write_listops(folder, seed=1, sizes={"train": 32, "valid": 4, "test": 4}, min_length=8, max_length=40)
    ((long, answer),) = generate_listops(1, random.Random(3), min_length=1990, max_length=2000, max_depth=10)
    for name, line in (("src", long), ("tgt", answer)):
        path = data / f"valid.{name}"
        path.write_text(f"{line}\n{path.read_text()}")
    return data, long
