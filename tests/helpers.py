import random


def random_pairs(n_samples, vocab, max_len=40, seed=0):
    """Source/target id sequences, source lengths 1..max_len, target lengths 0..max_len-1."""
    rng = random.Random(seed)
    src = [[rng.randrange(4, vocab) for _ in range(rng.randint(1, max_len))] for _ in range(n_samples)]
    tgt = [[rng.randrange(4, vocab) for _ in range(rng.randint(0, max_len - 1))] for _ in range(n_samples)]
    return src, tgt
