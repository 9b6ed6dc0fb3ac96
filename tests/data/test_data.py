"""Synthetic tasks, parallel text, vocabularies and batching."""

import json
import random

import pytest

from graphformer.data import synthetic
from graphformer.data.batching import CHUNK_BATCHES, decoding_batches, decoding_chunks, plan_batches, shard
from graphformer.data.corpus import build_vocabs, read_split
from graphformer.data.text import read_parallel
from graphformer.errors import UserError
from graphformer.vocab import SPECIALS, UNK, Vocab

SMALL = {"train": 200, "valid": 30, "test": 30}


def test_tasks_are_reproducible_from_the_seed(tmp_path):
    a = synthetic.write_task("sort", tmp_path / "a", seed=7, sizes=SMALL)
    b = synthetic.write_task("sort", tmp_path / "b", seed=7, sizes=SMALL)
    c = synthetic.write_task("sort", tmp_path / "c", seed=8, sizes=SMALL)
    for name in ("train.src", "train.tgt", "valid.src", "test.tgt"):
        assert (a / name).read_text() == (b / name).read_text()
    assert (a / "train.src").read_text() != (c / "train.src").read_text()


def test_a_folder_of_one_generated_task_is_never_read_as_another(tmp_path, capsys):
    from graphformer.cli import main

    data = synthetic.write_task("copy", tmp_path / "data", seed=1, sizes={"train": 20, "valid": 5, "test": 5})
    synthetic.write_task("copy", data, seed=2)  # the same task: its files are reused
    with pytest.raises(UserError, match="holds data generated for task 'copy', not 'sort'"):
        synthetic.write_task("sort", data)
    assert main(["train", "--task", "sort", "--data-dir", str(data), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not 'sort'" in err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("task", ["copy", "sort"])
def test_task_targets(task, tmp_path):
    split = read_split(synthetic.write_task(task, tmp_path, sizes=SMALL), "train")
    assert len(split) == 200
    for src, tgt in zip(split.src_words, split.tgt_words):
        assert len(src) >= 1 and all(len(t) == 1 and t.islower() for t in src)
        assert tgt == (sorted(src) if task == "sort" else src)


def test_default_sizes_and_length_distribution(tmp_path):
    data = synthetic.write_task("copy", tmp_path)
    lengths = [len(line.split()) for line in (data / "train.src").read_text().splitlines()]
    assert len(lengths) == 9000
    assert len((data / "valid.src").read_text().splitlines()) == 1000
    assert len((data / "test.src").read_text().splitlines()) == 1000
    mean = sum(lengths) / len(lengths)
    assert 14.8 < mean < 15.2 and min(lengths) >= 1


def test_vocab_from_training_data_only(tmp_path):
    (tmp_path / "train.src").write_text("a b b c\nb\n")
    (tmp_path / "train.tgt").write_text("x y\ny y\n")
    train = read_split(tmp_path, "train")
    src_v, tgt_v = build_vocabs(train, min_count=2, shared=False)
    assert src_v.itos == list(SPECIALS) + ["b"]
    assert tgt_v.itos == list(SPECIALS) + ["y"]
    assert src_v.encode(["a", "b"]) == [UNK, 4]
    shared, same = build_vocabs(train)
    assert shared is same and set(shared.itos[4:]) == {"a", "b", "c", "x", "y"}


def test_markers_written_in_text_are_unknown_words():
    """A literal "</s>" in a sentence must not end it, nor "<s>" or "<pad>" start or pad it."""
    v = Vocab.build([["a", "</s>", "b", "<s>", "<pad>", "<unk>"]])
    assert v.encode(["a", "</s>", "b", "<s>", "<pad>", "<unk>"]) == [v.stoi["a"], UNK, v.stoi["b"], UNK, UNK, UNK]


def test_vocab_round_trip(tmp_path):
    v = Vocab.build([["z", "y", "y"]])
    v.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json") == v
    (tmp_path / "run_vocab.json").write_text(json.dumps({"src": ["<pad>", "x"], "tgt": v.itos}))  # a run's vocab.json
    assert Vocab.load(tmp_path / "run_vocab.json", side="tgt") == v
    with pytest.raises(ValueError, match="side='src'"):
        Vocab.load(tmp_path / "run_vocab.json")
    assert v.decode(v.encode(["y", "z"]) + [2, 5]) == ["y", "z"]


@pytest.mark.parametrize(
    "src,tgt,msg",
    [
        (b"a b\nc\n", b"x\n", "has 2 lines but"),
        (b"", b"", "is empty"),
        (b"a\n\xff\xfe\n", b"x\ny\n", "line 2 is not valid UTF-8"),
    ],
)
def test_bad_parallel_files(tmp_path, src, tgt, msg):
    (tmp_path / "s").write_bytes(src)
    (tmp_path / "t").write_bytes(tgt)
    with pytest.raises(UserError, match=msg):
        read_parallel(tmp_path / "s", tmp_path / "t")


def test_a_byte_order_mark_is_no_part_of_the_first_word(tmp_path):
    (tmp_path / "s").write_bytes(b"\xef\xbb\xbfa b\r\nc\r\n")
    (tmp_path / "t").write_bytes(b"x\ny\n")
    assert read_parallel(tmp_path / "s", tmp_path / "t")[0] == [["a", "b"], ["c"]]


LENGTHS = [(i * 7) % 23 + 1 for i in range(500)]


def test_batches_cover_every_sample_once_and_are_deterministic():
    plan = plan_batches(LENGTHS, LENGTHS, batch_size=16, seed=3, epoch=1)
    assert sorted(i for b in plan for i in b) == list(range(500))
    assert plan == plan_batches(LENGTHS, LENGTHS, batch_size=16, seed=3, epoch=1)
    assert plan != plan_batches(LENGTHS, LENGTHS, batch_size=16, seed=3, epoch=2)
    assert all(len(b) == 16 for b in plan[:-1] if len(b) != 500 % 16)


@pytest.mark.parametrize("budget", [dict(batch_size=0), dict(batch_tokens=0), dict(batch_size=-2)])
def test_a_batch_budget_below_one_is_a_value_error(budget):
    with pytest.raises(ValueError, match="must be positive"):
        plan_batches([3, 4], [3, 4], **budget)


def test_token_budget_and_bucketing():
    plan = plan_batches(LENGTHS, LENGTHS, batch_tokens=200, seed=0)
    for b in plan:
        size = sum(2 * LENGTHS[i] + 1 for i in b)
        assert size <= 200 or len(b) == 1
    # buckets: batches are consecutive runs of the length-sorted samples, so their ranges don't overlap
    ranges = sorted((min(LENGTHS[i] for i in b), max(LENGTHS[i] for i in b)) for b in plan)
    assert all(hi <= next_lo for (_, hi), (next_lo, _) in zip(ranges, ranges[1:]))


def test_shards_partition_the_global_batches():
    plan = plan_batches(LENGTHS, LENGTHS, batch_size=10, seed=0)
    ranks = [shard(plan, r, 3) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1 and len(ranks[0]) == len(plan) // 3
    taken = [b for step in zip(*ranks) for b in step]  # step by step, rank by rank
    assert taken == plan[: len(taken)]  # every batch once, in order; only the short tail is dropped


def test_parallel_files_split_at_newlines_only(tmp_path):
    """Form feeds, U+2028 and the like are not line breaks: they would misalign the pairs."""
    (tmp_path / "a.src").write_text("a\x0cb\nc\u2028d\r\ne\n", encoding="utf-8")
    (tmp_path / "a.tgt").write_text("1\n2\n3\n", encoding="utf-8")
    src, tgt = read_parallel(tmp_path / "a.src", tmp_path / "a.tgt")
    assert src == [["a", "b"], ["c", "d"], ["e"]] and tgt == [["1"], ["2"], ["3"]]


def test_decoding_batches_sort_by_length_within_chunks_and_keep_to_the_budget():
    rng = random.Random(0)
    lengths = [rng.randint(1, 30) for _ in range(600)] + [70] + [rng.randint(1, 30) for _ in range(10)]
    chunks, batches = decoding_chunks(lengths, 40), decoding_batches(lengths, 40)
    assert len(chunks) > 2 and [i for chunk in chunks for i in chunk] == list(range(len(lengths)))
    assert all(sum(lengths[i] + 1 for i in chunk) <= CHUNK_BATCHES * 40 for chunk in chunks)
    order = [i for batch in batches for i in batch]
    assert sorted(order) == list(range(len(lengths)))  # every sentence, once
    assert all(sum(lengths[i] + 1 for i in batch) <= 40 or len(batch) == 1 for batch in batches)
    assert [70] in [[lengths[i] for i in batch] for batch in batches]  # over the budget: a batch of its own
    chunk_of = {i: c for c, chunk in enumerate(chunks) for i in chunk}
    assert all(len({chunk_of[i] for i in batch}) == 1 for batch in batches)  # a batch never spans two chunks
    start = 0
    for chunk in chunks:  # chunk after chunk, each sorted by length
        within = order[start : start + len(chunk)]
        assert sorted(within) == list(chunk)
        assert [lengths[i] for i in within] == sorted(lengths[i] for i in chunk)
        start += len(chunk)
