"""Multi30k: download with checksums (from a local HTTP server), tokenization, BLEU, training."""

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers import TINY_MODEL, read_jsonl

from graphformer.cli import main, read_config_file
from graphformer.data import multi30k, synthetic
from graphformer.data.tasks import EVALUATION_SPLITS, get_task
from graphformer.errors import UserError
from graphformer.evaluation.bleu import bleu_scores

ROOT = Path(__file__).resolve().parents[2]
MIRROR = ROOT.parent / "shared" / "data" / "multi30k"
pytestmark = pytest.mark.skipif(not MIRROR.is_dir(), reason="needs the Multi30k mirror in ../shared/data/multi30k")


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def serve(tmp_path):
    """Serve a directory on 127.0.0.1; returns its base URL."""
    servers = []

    def start(directory):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()


def test_download_lands_in_the_cache_and_verifies(tmp_path, serve):
    cache = multi30k.fetch(cache=tmp_path / "cache", base_url=serve(MIRROR))
    assert sorted(p.name for p in cache.iterdir()) == sorted(multi30k.SHA256)
    for name, digest in multi30k.SHA256.items():
        assert multi30k.sha256_of(cache / name) == digest
    assert len(multi30k.read_gz(cache / "val.en.gz")) == 1014


@pytest.mark.parametrize("damage", ["truncate", "alter"])
def test_a_bad_download_is_named_and_never_kept(tmp_path, serve, damage):
    bad = tmp_path / "bad"
    shutil.copytree(MIRROR, bad)
    data = (bad / "val.de.gz").read_bytes()
    (bad / "val.de.gz").write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-10] + b"0123456789")
    cache = tmp_path / "cache"
    with pytest.raises(UserError, match="val.de.gz is corrupt or truncated .*run again to download it afresh"):
        multi30k.fetch(cache=cache, base_url=serve(bad))
    assert not (cache / "val.de.gz").exists()
    assert not [p for p in cache.iterdir() if "partial" in p.name]
    # files fetched before the bad one were verified and stay; a good source then completes the cache
    multi30k.fetch(cache=cache, base_url=serve(MIRROR))
    assert multi30k.sha256_of(cache / "val.de.gz") == multi30k.SHA256["val.de.gz"]


def test_unreachable_server_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="could not download train.en.gz"):
        multi30k.fetch(cache=tmp_path / "cache", base_url="http://127.0.0.1:9")


@pytest.mark.parametrize(
    "reply,error",
    [
        (b"garbage\r\n\r\n", "could not download train.en.gz"),  # no HTTP at all: http.client's own errors
        (b"HTTP/1.0 200 OK\r\nContent-Length: 12abc\r\n\r\nnot gzip", "train.en.gz is corrupt or truncated"),
    ],
)
def test_a_garbled_reply_is_a_clear_error(tmp_path, reply, error):
    """A broken proxy's reply: a one-line error, and no partial file kept."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer():
        connection, _ = listener.accept()
        connection.recv(65536)
        connection.sendall(reply)
        connection.close()

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(UserError, match=error):
        multi30k.fetch(cache=tmp_path / "cache", base_url=f"http://127.0.0.1:{listener.getsockname()[1]}")
    listener.close()
    assert not [p for p in (tmp_path / "cache").iterdir() if "partial" in p.name]


def test_local_mirror(tmp_path):
    cache = multi30k.fetch(mirror=MIRROR, cache=tmp_path / "cache")
    assert (cache / "test_2016_flickr.de.gz").is_file()
    # A mistyped mirror is refused even though the cache, complete now, needs nothing from it.
    with pytest.raises(UserError, match="mirror .*nowhere is not a directory"):
        multi30k.fetch(mirror=tmp_path / "nowhere", cache=cache)


def test_tokenize_detokenize_round_trip_on_real_lines():
    for lang in ("en", "de"):
        pipeline = multi30k.MosesPipeline(lang)
        lines = multi30k.read_gz(MIRROR / f"val.{lang}.gz")
        same = sum(pipeline.detokenize(pipeline.tokenize(line)) == line.strip() for line in lines)
        assert same / len(lines) > 0.99
    en = multi30k.MosesPipeline("en")
    assert en.tokenize("A well-dressed man's dog.") == ["A", "well", "@-@", "dressed", "man", "'s", "dog", "."]
    assert en.detokenize(en.tokenize("A well-dressed man's dog.")) == "A well-dressed man's dog."


def test_bleu_equals_sacrebleu():
    hyps = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee ."]
    refs = ["Ein Mann fährt ein Fahrrad .", "Zwei Hunde spielen im Schnee ."]
    scores = bleu_scores([h.split() for h in hyps], [r.split() for r in refs], hyps, refs)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores["bleu_tokenized"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)
    assert scores["bleu_signature"].startswith("nrefs:1|")


@pytest.mark.slow
def test_short_training_on_real_pairs_lowers_the_validation_loss(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRAPHFORMER_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "multi30k",
                "--data-dir",
                str(MIRROR),
                "--train-limit",
                "400",
                "--out",
                str(run),
                "--epochs",
                "3",
                "--batch-size",
                "32",
                "--min-count",
                "2",
                "--warmup",
                "50",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    metrics = read_jsonl(run / "metrics.jsonl")
    assert metrics[-1]["valid_loss"] < metrics[0]["valid_loss"]
    (tmp_path / "in.txt").write_text("A man is riding a bike.\n\nTwo dogs play in the snow.\n")
    capsys.readouterr()
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt")]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) == 4 and out[1] == ""
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 1000 and {"bleu", "bleu_tokenized", "bleu_signature"} <= set(scores)
    assert 0.0 <= scores["bleu"] <= 100.0
    for name in multi30k.TEST_SETS[1:]:  # every test set is prepared with the run's data, aligned
        lines = multi30k.read_gz(MIRROR / f"{name}.de.gz")
        assert len((run / "data" / f"{name}.src").read_text().splitlines()) == len(lines) > 400
    assert main(["evaluate", str(run), "--split", "test_2017_mscoco", "--json"]) == 0  # out of domain
    coco = json.loads(capsys.readouterr().out)
    assert coco["n"] == len(multi30k.read_gz(MIRROR / "test_2017_mscoco.de.gz")) and "bleu_signature" in coco
    # the recipe's tuning step: every candidate scored on val, the best one printed as flags
    env = {
        **os.environ,
        "BIN": str(Path(sys.executable).parent),
        "CHECKPOINTS": "best last",
        "BEAMS": "2",
        "ALPHAS": "0.0 2.0",
    }
    tuned = subprocess.run(
        ["bash", str(ROOT / "examples" / "multi30k" / "tune.sh"), str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    *rows, winner = tuned.stdout.splitlines()
    rows = [json.loads(row) for row in rows]
    assert [(r["checkpoint"], r["alpha"]) for r in rows] == [("best", 0.0), ("best", 2.0), ("last", 0.0), ("last", 2.0)]
    best = max(rows, key=lambda r: r["valid_bleu_tokenized"])  # the first of equals, as the script keeps
    assert winner.startswith(f"best on valid: --checkpoint {best['checkpoint']} --beam 2 --alpha {best['alpha']} ")
    # the precision benchmark: both precisions, greedy and the beam, each against float32's outputs
    bench = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.precision",
            "--run",
            str(run),
            "--beam",
            "2",
            "--rounds",
            "1",
            "--sentences",
            "200",
            "--out",
            str(tmp_path / "bench"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert bench.returncode == 0, bench.stderr[-2000:]
    result = json.loads((tmp_path / "bench" / "precision.json").read_text())
    rows = result["rows"]
    assert result["sentences"] == 200
    assert [(r["precision"], r["beam"]) for r in rows] == [
        ("float32", 1),
        ("bfloat16", 1),
        ("float32", 2),
        ("bfloat16", 2),
    ]
    for row in rows:
        assert 0.0 <= row["bleu"] <= 100.0 and 0.0 <= row["identical_to_float32"] <= 1.0
        if row["precision"] == "float32":
            assert row["identical_to_float32"] == 1.0 and row["vs_float32"] == 1.0


@pytest.mark.slow
def test_subword_vocabulary_learned_on_training_text(tmp_path, capsys, monkeypatch):
    from graphformer.data import subwords
    from graphformer.data.subwords import SubwordPipeline

    monkeypatch.setenv("GRAPHFORMER_CACHE", str(tmp_path / "cache"))
    learned_from = []
    learn = subwords.learn
    monkeypatch.setattr(subwords, "learn", lambda lines, *a: learned_from.append(len(lines)) or learn(lines, *a))
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "multi30k",
                "--data-dir",
                str(MIRROR),
                "--bpe",
                "1000",
                "--train-limit",
                "300",
                "--out",
                str(run),
                "--epochs",
                "1",
                "--batch-size",
                "32",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    assert learned_from == [600]  # the 300 training pairs the run trains on, English and German
    pieces = SubwordPipeline(run / "subwords.model")
    assert pieces.model.get_piece_size() == 1000
    assert pieces.detokenize(pieces.tokenize("Ein Mann fährt ein Fahrrad.")) == "Ein Mann fährt ein Fahrrad."
    train_src = (run / "data-bpe1000" / "train.src").read_text(encoding="utf-8").splitlines()
    assert len(train_src) == 29000 and "▁" in train_src[0]
    vocab = json.loads((run / "vocab.json").read_text())["src"]
    assert len(vocab) <= 1000 + 4  # the pieces and graphformer's specials
    (tmp_path / "in.txt").write_text("A man is riding a bike.\n")
    capsys.readouterr()
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt"), "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert "\u2581" not in out and len(out.splitlines()) == 1, out
    assert main(["evaluate", str(run), "--split", "valid", "--beam", "1", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 1014 and 0.0 <= scores["bleu_tokenized"] <= 100.0 and 0.0 <= scores["bleu"] <= 100.0
    # The training split is the 300 pairs the run trained on, their references included.
    assert main(["evaluate", str(run), "--split", "train", "--beam", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 300

    (run / "subwords.model").write_text("garbage\n")
    assert main(["translate", str(run), "--input", str(tmp_path / "in.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "subwords.model is damaged" in err
    (run / "subwords.model").unlink()  # a run cannot read text without its subword model
    assert main(["evaluate", str(run), "--split", "valid", "--beam", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "subwords.model is missing" in err


def test_subwords_are_for_raw_text_tasks_only(tmp_path, capsys):
    assert main(["train", "--task", "copy", "--bpe", "1000", "--out", str(tmp_path / "run")]) == 2
    assert "--bpe applies to the multi30k task" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_killed_runs_subword_model_of_other_options_is_learned_anew(tmp_path, monkeypatch):
    from graphformer.data.subwords import SubwordPipeline

    monkeypatch.setenv("GRAPHFORMER_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    common = [
        "train",
        "--task",
        "multi30k",
        "--data-dir",
        str(MIRROR),
        "--train-limit",
        "100",
        "--max-steps",
        "1",
        "--batch-size",
        "32",
        "--out",
        str(run),
        *TINY_MODEL,
    ]
    assert main([*common, "--bpe", "300"]) == 0
    (run / "checkpoint_last.pt").unlink()  # killed before its first epoch ended
    assert main([*common, "--bpe", "400"]) == 0
    assert SubwordPipeline(run / "subwords.model").model.get_piece_size() == 400
    assert json.loads((run / "subwords.json").read_text()) == {"pieces": 400, "train_limit": 100}
    (run / "checkpoint_last.pt").unlink()  # a run of an earlier version, which kept no subwords.json
    (run / "subwords.json").unlink()
    assert main([*common, "--bpe", "300"]) == 0
    assert SubwordPipeline(run / "subwords.model").model.get_piece_size() == 300


@pytest.mark.slow
def test_the_cpu_recipe_script_trains_with_its_config_averages_tunes_and_resumes(tmp_path):
    """examples/multi30k/cpu.sh end to end, shrunk by TRAIN_FLAGS (which override the recipe's
    options in cpu.yaml): it trains, averages the best 5 kept epochs, reports val and test with
    tune.sh's choice, and run again with more epochs it resumes the run."""
    run = tmp_path / "run"
    shrink = "--train-limit 200 --layers 1 --d-model 16 --heads 2 --d-ff 32 --batch-tokens 1000 --quiet"
    env = {
        **os.environ,
        "BIN": str(Path(sys.executable).parent),
        "RUN": str(run),
        "BEAMS": "1",
        "ALPHAS": "0.6",
        "GRAPHFORMER_CACHE": str(tmp_path / "cache"),
    }

    def cpu_sh(epochs: int) -> list[str]:
        done = subprocess.run(
            ["bash", str(ROOT / "examples" / "multi30k" / "cpu.sh"), str(MIRROR)],
            env={**env, "TRAIN_FLAGS": f"{shrink} --epochs {epochs}"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        valid, test = (json.loads(line) for line in done.stdout.splitlines()[-2:])
        choice = done.stderr.splitlines()[-1]  # tune.sh's winner, also on stderr
        for split, scores in (("valid", valid), ("test", test)):
            assert scores["split"] == split
            assert choice.startswith(
                f"best on valid: --checkpoint {Path(scores['checkpoint']).stem.split('_')[1]} "
                f"--beam {scores['beam']} --alpha {scores['alpha']} "
            )
        return sorted(p.name for p in (run / "checkpoints").iterdir())

    assert cpu_sh(epochs=6) == [f"epoch_{e:04d}.pt" for e in range(1, 7)]
    model, train = read_config_file(str(ROOT / "examples" / "multi30k" / "cpu.yaml"))
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["layers"] == 1 and saved["train"]["epochs"] == 6  # TRAIN_FLAGS win
    for section, recipe in (("model", model), ("train", train)):
        kept = {
            name: value for name, value in recipe.items() if f"--{name.replace('_', '-')} " not in f"{shrink} --epochs "
        }
        assert {name: saved[section][name] for name in kept} == kept  # the recipe's, for the rest
    averaged = torch.load(run / "checkpoint_averaged.pt", map_location="cpu", weights_only=False)
    assert len(averaged["averaged_from"]) == 5
    assert cpu_sh(epochs=8) == [f"epoch_{e:04d}.pt" for e in range(1, 9)]  # resumed: 2 more epochs, all kept
    assert len(read_jsonl(run / "metrics.jsonl")) == 8


def test_every_test_set_is_a_split_by_its_name_and_test_is_the_2016_one():
    task = get_task("multi30k")
    assert task.split_file("test_2016_flickr") == "test" and task.split_file("test") == "test"
    assert [task.split_file(name) for name in multi30k.TEST_SETS[1:]] == list(multi30k.TEST_SETS[1:])
    assert set(multi30k.TEST_SETS) <= set(EVALUATION_SPLITS)
    with pytest.raises(UserError, match="test_2017_flickr"):  # the other tasks have train, valid and test
        get_task("copy").split_file("test_2017_flickr")


def test_a_test_set_another_task_lacks_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    data = synthetic.write_task("copy", tmp_path / "data", sizes={"train": 40, "valid": 8, "test": 8})
    argv = ["train", "--out", str(run), "--data-dir", str(data), "--epochs", "1", *TINY_MODEL]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test_2017_mscoco"]) == 2
    err = capsys.readouterr().err
    assert "test_2017_mscoco" in err and err.count("\n") == 1, err
