import random


def random_pairs(n_samples, vocab, max_len=40, seed=0):
    """Source/target id sequences, source lengths 1..max_len, target lengths 0..max_len-1."""
    rng = random.Random(seed)
    src = [[rng.randrange(4, vocab) for _ in range(rng.randint(1, max_len))] for _ in range(n_samples)]
    tgt = [[rng.randrange(4, vocab) for _ in range(rng.randint(0, max_len - 1))] for _ in range(n_samples)]
    return src, tgt


TINY_MODEL = ["--layers", "1", "--d-model", "32", "--heads", "4", "--d-ff", "64", "--quiet"]


def small_copy_data(path, n_train=240, seed=1):
    from graphformer.data import synthetic
    return synthetic.write_task("copy", path, seed=seed, sizes={"train": n_train, "valid": 40, "test": 40})


def small_recall_data(path, seed=1):
    """Associative recall of 8-12 tokens (4 values: chance 25 %), for the encoder classifier."""
    from graphformer.data import recall
    return recall.write_recall(path, seed=seed, sizes={"train": 160, "valid": 30, "test": 30},
                               min_length=8, max_length=12, num_keys=6, num_values=4)


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

    a = checkpoint.load(run_a / checkpoint.LAST)["model"]
    b = checkpoint.load(run_b / checkpoint.LAST)["model"]
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
