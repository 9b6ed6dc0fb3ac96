"""Per-sample attention graphs from the command line: train, resume, evaluate, translate and record
with the parse tree and with edges files, and one-line refusals of bad edges."""

import json
import math
import shutil

import pytest
import torch
from helpers import TINY_MODEL, lra_format, recorded_dense, small_copy_data, snapshot

from graphformer.cli import main
from graphformer.data import listops, synthetic
from graphformer.graphs.sample_edges import parse_tree
from graphformer.training import checkpoint
from graphformer.viz.recording import load_records

SMALL = {"train": 64, "valid": 8, "test": 8}
LISTOPS = ["--task", "listops", "--model", "encoder", "--positions", "none", "--pooling", "last"]


@pytest.fixture(scope="module")
def listops_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("listops") / "data"
    return listops.write_listops(folder, seed=1, min_length=8, max_length=30, sizes=SMALL)


@pytest.fixture(scope="module")
def tree_run(listops_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("tree") / "run"
    argv = ["train", *LISTOPS, "--data-dir", str(listops_data), "--out", str(run), "--enc-attention", "parse-tree"]
    assert main([*argv, "--epochs", "1", "--batch-size", "16", "--viz-every", "1", *TINY_MODEL]) == 0
    return run


def test_a_parse_tree_run_attends_along_each_samples_tree_only(tree_run, listops_data):
    record = load_records(tree_run)[-1]
    words = (listops_data / "valid.src").read_text().splitlines()[0].split()
    u, v = parse_tree(words)
    weights = recorded_dense(record)["enc"]  # (layers, heads, queries, keys), NaN where there is no edge
    drawn = ~torch.isnan(weights[0, 0])
    expected = torch.zeros_like(drawn)
    expected[v, u] = True
    assert torch.equal(drawn, expected)
    sums = torch.nan_to_num(weights).sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))


def test_a_parse_tree_run_resumes_evaluates_and_translates(tree_run, listops_data, capsys):
    assert main(["train", "--out", str(tree_run), "--resume", "--epochs", "2", "--quiet"]) == 0
    assert checkpoint.load(tree_run / "checkpoint_last.pt")["progress"]["epoch"] == 2
    capsys.readouterr()
    assert main(["evaluate", str(tree_run), "--split", "test", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 8 and 0 <= scores["accuracy"] <= 1 and math.isfinite(scores["loss"])
    source = listops_data / "test.src"
    assert main(["translate", str(tree_run), "--input", str(source), "--quiet"]) == 0
    answers = capsys.readouterr().out.splitlines()
    assert len(answers) == 8 and all(a in listops.DIGITS for a in answers)


# Each kind of expression that does not parse, and the words its refusal gives.
MALFORMED = [
    ("[MAX 1 2 )", "token 3 ')' closes no '(' (the '[MAX' at token 0 closes with ']')"),
    ("( [MAX 1 ] ]", "token 4 ']' closes no operator (the '(' at token 0 closes with ')')"),
    ("[MAX ]", "token 1 ']' closes '[MAX' (token 0), which has no argument"),
    ("[MIN 3 [SM 4 5 ]", "the operator at token 0 '[MIN' is never closed"),
    ("( ( ( [MAX 1 ) 2 ) ]", "the '(' at token 0 is never closed"),
]


def one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graphformer: error: "), err
    return err


def write_split(data, split, sources, answers):
    data.mkdir(exist_ok=True)
    (data / f"{split}.src").write_text("".join(line + "\n" for line in sources))
    (data / f"{split}.tgt").write_text("".join(line + "\n" for line in answers))


@pytest.mark.parametrize("bad,named", MALFORMED)
def test_a_sample_that_does_not_parse_stops_the_run_naming_its_file_and_line(tmp_path, capsys, bad, named):
    data, run = tmp_path / "data", tmp_path / "run"
    write_split(data, "train", ["[MAX 1 2 ]", "( ( ( [MIN 3 ) 4 ) ] )", bad], ["2", "3", "1"])
    write_split(data, "valid", ["[MAX 1 2 ]"], ["2"])
    argv = ["train", "--task", "classify", "--model", "encoder", "--data-dir", str(data), "--out", str(run)]
    err = one_line_error(capsys, [*argv, "--enc-attention", "parse-tree", *TINY_MODEL])
    assert f"{data / 'train.src'}: line 3 does not parse as a bracketed expression (parse-tree): {named}" in err
    assert not run.exists()


@pytest.mark.parametrize("bad,named", MALFORMED)
def test_evaluate_and_translate_refuse_what_does_not_parse_and_leave_the_run_as_it_was(
    tree_run, tmp_path, capsys, bad, named
):
    before = snapshot(tree_run)
    other = tmp_path / "other"
    write_split(other, "test", ["[MAX 1 2 ]", "[SM 3 4 ]", bad], ["2", "7", "1"])
    err = one_line_error(capsys, ["evaluate", str(tree_run), "--split", "test", "--data-dir", str(other)])
    assert f"{other / 'test.src'}: line 3 does not parse" in err and named in err
    lines = tmp_path / "in.txt"
    lines.write_text(f"[MAX 1 2 ]\n{bad}\n")
    err = one_line_error(capsys, ["translate", str(tree_run), "--input", str(lines)])
    assert f"input line 2 does not parse as a bracketed expression (parse-tree): {named}" in err
    assert snapshot(tree_run) == before


def test_a_resumed_run_refuses_a_split_that_stopped_parsing_and_is_left_as_it_was(listops_data, tmp_path, capsys):
    data, run = tmp_path / "data", tmp_path / "run"
    shutil.copytree(listops_data, data)
    argv = ["train", *LISTOPS, "--data-dir", str(data), "--out", str(run), "--enc-attention", "parse-tree"]
    assert main([*argv, "--epochs", "1", "--batch-size", "32", *TINY_MODEL]) == 0
    before = snapshot(run)
    valid = (data / "valid.src").read_text().splitlines()
    (data / "valid.src").write_text("".join(line + "\n" for line in valid[:1] + ["[MAX ]"] + valid[2:]))
    err = one_line_error(capsys, ["train", "--out", str(run), "--resume", "--epochs", "2"])
    assert f"{data / 'valid.src'}: line 2 does not parse" in err and "which has no argument" in err
    assert snapshot(run) == before


def test_a_source_with_no_operator_is_refused_for_the_parse_tree(tmp_path, capsys):
    """A copy task's sentences hold no operator: each would be a star around </s>."""
    data, run = small_copy_data(tmp_path / "data", n_train=8), tmp_path / "run"
    argv = ["train", "--task", "copy", "--data-dir", str(data), "--out", str(run), "--enc-attention", "parse-tree"]
    err = one_line_error(capsys, [*argv, *TINY_MODEL])
    assert f"{data / 'train.src'}: line 1 does not parse" in err and "is an operator" in err
    assert not run.exists()


def test_lras_parenthesised_listops_trains_along_the_tree_of_its_operators(tmp_path, capsys):
    """LRA's files wrap each operator's arguments in grouping parentheses (`helpers.lra_format`):
    every token but the parentheses reads exactly the tokens it reads without them."""
    plain = listops.write_listops(tmp_path / "plain", seed=2, min_length=8, max_length=20, sizes=SMALL)
    data, run = tmp_path / "lra", tmp_path / "run"
    for split in SMALL:
        lines = (plain / f"{split}.src").read_text().splitlines()
        write_split(data, split, [lra_format(line) for line in lines], (plain / f"{split}.tgt").read_text().split())
    argv = ["train", *LISTOPS, "--data-dir", str(data), "--out", str(run), "--enc-attention", "parse-tree"]
    assert main([*argv, "--epochs", "1", "--batch-size", "16", "--viz-every", "1", *TINY_MODEL]) == 0
    words = (data / "valid.src").read_text().splitlines()[0].split()
    drawn = ~torch.isnan(recorded_dense(load_records(run)[-1])["enc"][0, 0])  # (queries, keys): is there an edge
    kept = [i for i, word in enumerate(words) if word not in ("(", ")")] + [len(words)]  # and </s>
    u, v = parse_tree((plain / "valid.src").read_text().splitlines()[0].split())
    expected = torch.zeros(len(kept), len(kept), dtype=torch.bool)
    expected[v, u] = True
    assert torch.equal(drawn[kept][:, kept], expected)


def test_sums_train_evaluate_and_translate_with_each_sources_operands(tmp_path, capsys):
    """--cross-attention operands: derived from every source, decoded a token at a time."""
    data = synthetic.write_task("addition", tmp_path / "data", sizes={"train": 24, "valid": 6, "test": 6})
    run = tmp_path / "run"
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run)]
    assert main([*argv, "--cross-attention", "operands", "--epochs", "1", *TINY_MODEL]) == 0
    assert "valid_exact_match" in json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 6 and 0 <= scores["exact_match"] <= scores["char_accuracy"] <= 1
    lines = tmp_path / "in.txt"
    lines.write_text("1 2 + 3 4\n9 9 9 + 1\n")
    assert main(["translate", str(run), "--input", str(lines), "--quiet"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    lines.write_text("1 2 + 3 4\n9 9 9 1\n")
    assert main(["translate", str(run), "--input", str(lines)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "input line 2 is not two operands joined by '+'" in err


def test_a_source_without_its_operands_stops_the_run_before_it_starts(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=8)
    run = tmp_path / "run"
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--cross-attention", "operands"]
    assert main([*argv, *TINY_MODEL]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{data / 'train.src'}: line 1 is not two operands" in err
    assert not run.exists()


def write_enc_edges(data, split, pick):
    """``{split}.enc.edges``: for each source line, the pairs ``pick(n)`` over its n + 1 nodes."""
    lines = (data / f"{split}.src").read_text().splitlines()
    text = "".join(" ".join(f"{k}-{q}" for k, q in pick(len(line.split()))) + "\n" for line in lines)
    (data / f"{split}.enc.edges").write_text(text)


def reverse_links(n):
    """Each token reads itself and the token at the mirrored position (a graph no length pattern
    gives); </s> (node n) reads itself."""
    return [(n - 1 - i, i) for i in range(n)] + [(i, i) for i in range(n + 1)]


@pytest.fixture(scope="module")
def edges_run(tmp_path_factory):
    """A run whose encoder reads each sample's edges (`reverse_links`) alone, with its data; the
    first line of valid.enc.edges starts with a byte-order mark, which the reader drops as from a .src."""
    root = tmp_path_factory.mktemp("edges")
    data = small_copy_data(root / "data", n_train=32)
    for split in ("train", "valid", "test"):
        write_enc_edges(data, split, reverse_links)
    valid = data / "valid.enc.edges"
    valid.write_bytes(b"\xef\xbb\xbf" + valid.read_bytes())
    run = root / "run"
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--epochs", "1"]
    assert main([*argv, "--enc-attention", "edges", "--viz-every", "1", *TINY_MODEL]) == 0
    return run, data


def test_an_edges_file_run_trains_and_translates_with_its_edges(edges_run, tmp_path, capsys):
    run, _ = edges_run
    record = load_records(run)[-1]
    n = len(record["src_labels"]) - 1  # the tokens, then </s>
    drawn = ~torch.isnan(recorded_dense(record)["enc"][0, 0])
    expected = torch.eye(n + 1, dtype=torch.bool)
    for key, query in reverse_links(n):
        expected[query, key] = True
    assert torch.equal(drawn, expected)
    inputs = tmp_path / "in.txt"
    inputs.write_text("a b c\n\nd e\n")
    edges = tmp_path / "in.edges"
    links = ["".join(" ".join(f"{k}-{q}" for k, q in reverse_links(n))) for n in (3, 2)]
    edges.write_text(f"{links[0]}\n\n{links[1]}\n")  # an empty input line is not translated: no key needed
    capsys.readouterr()
    assert main(["translate", str(run), "--input", str(inputs), "--edges", str(edges), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[1] == "" and out[0] and out[2]
    assert main(["translate", str(run), "--input", str(inputs), "--quiet"]) == 2
    assert "--edges FILE" in capsys.readouterr().err


def refused(capsys, argv, folder, *needles):
    """``argv`` fails with one line holding ``needles``, exit 2, and leaves ``folder`` as it was
    (absent stays absent)."""
    before = snapshot(folder) if folder.exists() else None
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graphformer: error: "), err
    assert all(needle in err for needle in needles), err
    assert captured.out == ""
    assert (snapshot(folder) if folder.exists() else None) == before


def without_keys(split, line, keep):
    """A change to ``{split}.{sublayer}.edges``: line ``line`` (1-based) keeps only the pairs
    ``keep`` picks."""

    def change(lines):
        pairs = lines[line - 1].split()
        lines[line - 1] = " ".join(p for p in pairs if keep(*map(int, p.split("-"))))
        return lines

    return split, change


@pytest.mark.parametrize(
    "sublayer,change,named",
    [  # (the sub-layer's option, which file changes and how, what the one line names)
        ("enc", without_keys("train", 2, lambda k, q: q != 1), "train.enc.edges: line 2: query 1 has no key"),
        ("enc", without_keys("valid", 3, lambda k, q: False), "valid.enc.edges: line 3: query 0 has no key"),
        ("enc", without_keys("test", 1, lambda k, q: q != 0), "test.enc.edges: line 1: query 0 has no key"),
        ("cross", without_keys("train", 2, lambda k, q: q != 2), "train.cross.edges: line 2: query 2 has no key"),
    ],
)
def test_a_query_left_without_keys_is_one_line_naming_file_and_line_and_writes_nothing(
    tmp_path, capsys, sublayer, change, named
):
    data = small_copy_data(tmp_path / "data", n_train=8)
    for split in ("train", "valid", "test"):
        sources = [line.split() for line in (data / f"{split}.src").read_text().splitlines()]
        targets = [line.split() for line in (data / f"{split}.tgt").read_text().splitlines()]
        # enc: every node reads itself; cross: decoder node t reads every source node
        pairs = [
            [(i, i) for i in range(len(x) + 1)]
            if sublayer == "enc"
            else [(i, t) for i in range(len(x) + 1) for t in range(len(y) + 1)]
            for x, y in zip(sources, targets)
        ]
        lines = [" ".join(f"{k}-{q}" for k, q in p) for p in pairs]
        if split == change[0]:
            lines = change[1](lines)
        (data / f"{split}.{sublayer}.edges").write_text("".join(line + "\n" for line in lines))
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("an --out folder that holds no run yet\n")
    argv = [
        "train",
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--out",
        str(run),
        f"--{sublayer}-attention",
        "edges",
    ]
    refused(capsys, [*argv, *TINY_MODEL], run, str(data / named.split(":")[0]), named)


def test_an_empty_edges_line_is_fine_where_a_length_pattern_gives_every_query_a_key(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=8)
    for split in ("train", "valid", "test"):
        (data / f"{split}.enc.edges").write_text("\n" * len((data / f"{split}.src").read_text().splitlines()))
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--epochs", "1", *TINY_MODEL]
    alone = tmp_path / "alone"
    refused(capsys, [*argv, "--out", str(alone), "--enc-attention", "edges"], alone, "train.enc.edges: line 1: query 0")
    assert main([*argv, "--out", str(tmp_path / "joined"), "--enc-attention", "window:1+edges"]) == 0


def test_evaluate_and_translate_refuse_a_query_without_keys_naming_file_and_line(edges_run, tmp_path, capsys):
    run, data = edges_run
    other = tmp_path / "other"
    other.mkdir()
    for name in ("test.src", "test.tgt", "test.enc.edges"):
        (other / name).write_bytes((data / name).read_bytes())
    lines = (other / "test.enc.edges").read_text().splitlines()
    (other / "test.enc.edges").write_text("".join(line + "\n" for line in [lines[0], "", *lines[2:]]))
    evaluate = ["evaluate", str(run), "--split", "test", "--data-dir", str(other)]
    refused(capsys, evaluate, run, f"{other / 'test.enc.edges'}: line 2: query 0 has no key")
    inputs, edges = tmp_path / "in.txt", tmp_path / "in.edges"
    inputs.write_text("a b\nc d e\n")
    edges.write_text("0-0 1-1 2-2\n0-0 1-1 3-3\n")
    translate = ["translate", str(run), "--input", str(inputs), "--edges", str(edges)]
    refused(capsys, translate, run, f"{edges}: line 2: query 2 has no key")


@pytest.mark.parametrize(
    "text,named",
    [
        (lambda lines: lines[:-1], "lines but its data has"),
        (lambda lines: [b"0-0 1-x"] + lines[1:], "line 1: '1-x' is not a key-query pair"),
        (lambda lines: lines[:2] + [b"0-999"] + lines[3:], "line 3: edge 0-999 is outside the sample"),
        (lambda lines: lines[:1] + [lines[1] + b" 0-\xff"] + lines[2:], "line 2 is not valid UTF-8"),
        (lambda lines: lines[:1] + [b"0-" + b"1" * 30] + lines[2:], "line 2: '0-111"),
    ],
)
def test_a_bad_edges_file_is_one_line_naming_file_and_line_and_writes_nothing(tmp_path, capsys, text, named):
    data = small_copy_data(tmp_path / "data", n_train=8)
    for split in ("train", "valid"):
        write_enc_edges(data, split, reverse_links)
    path = data / "train.enc.edges"
    path.write_bytes(b"".join(line + b"\n" for line in text(path.read_bytes().splitlines())))
    run = tmp_path / "run"
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--enc-attention", "edges"]
    refused(capsys, [*argv, *TINY_MODEL], run, str(path), named)
    assert not run.exists()


def test_decoder_edges_train_by_loss_and_refuse_decoding(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=16)
    for split in ("train", "valid", "test"):
        tgt = (data / f"{split}.tgt").read_text().splitlines()
        causal_pairs = ("0-0 " + " ".join(f"{t - 1}-{t} {t}-{t}" for t in range(1, len(y.split()) + 1)) for y in tgt)
        (data / f"{split}.dec.edges").write_text("".join(line + "\n" for line in causal_pairs))
    run = tmp_path / "run"
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--dec-attention", "edges"]
    assert main([*argv, "--epochs", "1", *TINY_MODEL]) == 0
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert "valid_loss" in metrics and "valid_exact_match" not in metrics
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "valid"]) == 0  # teacher forcing is all it reports
    report = capsys.readouterr().out
    assert "loss=" in report and "exact_match" not in report
    translate = ["translate", str(run), "--input", str(data / "valid.src")]  # stdout is no terminal: a bar would show
    refused(capsys, translate, run, "cannot decode with per-sample edges in the dec attention")
    copy = ["train", "--task", "copy", "--out", str(tmp_path / "r2"), "--dec-attention", "edges"]
    assert main([*copy, "--data-dir", str(data), *TINY_MODEL]) == 2
    assert "--select-by exact_match needs decoding" in capsys.readouterr().err
