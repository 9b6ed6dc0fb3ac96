"""`graphformer.decoding.inputs`: input lines as source ids, cut to the model's positions, with
the tokens outside the vocabulary counted."""

from types import SimpleNamespace

from graphformer.decoding import encode_lines, source_limit
from graphformer.vocab import UNK, Vocab


def test_lines_are_encoded_in_order_and_an_empty_line_gives_no_ids():
    vocab = Vocab.build([["a", "b", "c"]])
    source = encode_lines(["a b", "", "c a c"], str.split, vocab, limit=10)
    assert source.ids == [vocab.encode(["a", "b"]), [], vocab.encode(["c", "a", "c"])]
    assert source.truncated == [] and not source.unknown


def test_a_long_line_keeps_its_first_tokens_and_is_reported_by_number_and_length():
    vocab = Vocab.build([["a", "b"]])
    source = encode_lines(["a b", "a b a b a", "b"], str.split, vocab, limit=3)
    assert [len(ids) for ids in source.ids] == [2, 3, 1]
    assert source.ids[1] == vocab.encode(["a", "b", "a"])
    assert source.truncated == [(2, 5)]  # line numbers count from 1, as an editor shows them


def test_unknown_tokens_are_counted_and_listed_most_frequent_first():
    vocab = Vocab.build([["a"]])
    source = encode_lines(["a x y", "y z y", "w"], str.split, vocab, limit=10)
    assert source.ids[0][1:] == [UNK, UNK]
    assert dict(source.unknown) == {"x": 1, "y": 3, "z": 1, "w": 1}
    assert source.most_unknown() == ["y", "w", "x", "z"]  # ties alphabetical
    assert source.most_unknown(2) == ["y", "w"]


def test_unknown_tokens_cut_off_a_long_line_are_counted_too():
    """The count is of what the user gave (a sign of a wrongly tokenized file), not of what is decoded."""
    source = encode_lines(["a a q"], str.split, Vocab.build([["a"]]), limit=2)
    assert source.unknown == {"q": 1} and source.truncated == [(1, 3)]


def test_the_limit_is_the_models_positions_less_those_the_graph_adds():
    model = SimpleNamespace(cfg=SimpleNamespace(max_len=20))
    pool = SimpleNamespace(source_positions=lambda length: length + 2)  # </s> and <cls>
    assert source_limit(model, pool) == 18
