"""``graphformer attend``: the maps a trained run attends with on any input, as pictures, as the
offline HTML page (opened in the headless browser of test_player), and from Python; and its
one-line refusals of bad input, which write nothing (the universal models: test_attend_steps)."""

import base64
import json
import math
import re

import numpy as np
import pytest
import torch
from helpers import saved_dense, small_copy_data, small_recall_data, snapshot, train_tiny
from PIL import Image
from test_player import browser  # noqa: F401  (a fixture: the headless Chromium)

import graphformer.viz
from graphformer.cli import main
from graphformer.decoding import translate_ids
from graphformer.graphs import make_batch
from graphformer.running.loaded import LoadedRun
from graphformer.viz import attention_maps
from graphformer.vocab import EOS


def train(data, run, *options):
    return train_tiny(data, run, *options)


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A tiny encoder-decoder trained 2 epochs on copy, and its data."""
    root = tmp_path_factory.mktemp("attend-copy")
    data = small_copy_data(root / "data", n_train=120)
    return train(data, root / "run", "--task", "parallel", "--epochs", "2", "--layers", "2"), data


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory):
    """An encoder classifier (recall, <cls> pooling) trained 1 epoch, and its data."""
    root = tmp_path_factory.mktemp("attend-classifier")
    data = small_recall_data(root / "data")
    options = ["--task", "recall", "--model", "encoder", "--pooling", "cls", "--epochs", "1"]
    return train(data, root / "run", *options), data


def mirrored(n):
    """Key-query pairs over n tokens and </s>: each node reads itself, each token its mirror image."""
    return [(n - 1 - i, i) for i in range(n)] + [(i, i) for i in range(n + 1)]


@pytest.fixture(scope="module")
def edges_run(tmp_path_factory):
    """A copy run whose encoder attends along each sample's own edges (`mirrored`) alone."""
    root = tmp_path_factory.mktemp("attend-edges")
    data = mirrored_data(root / "data")
    return train(data, root / "run", "--task", "parallel", "--epochs", "1", "--enc-attention", "edges")


def mirrored_data(folder):
    """Small copy data in ``folder`` with an edges file per split: each sample's `mirrored` pairs."""
    data = small_copy_data(folder, n_train=32)
    for split in ("train", "valid", "test"):
        lines = (data / f"{split}.src").read_text().splitlines()
        pairs = [" ".join(f"{k}-{q}" for k, q in mirrored(len(line.split()))) for line in lines]
        (data / f"{split}.enc.edges").write_text("".join(p + "\n" for p in pairs))
    return data


def first_lines(data, count):
    return (data / "test.src").read_text().splitlines()[:count]


def page_maps(page: str) -> dict:
    """{sub-layer: (layers, heads, queries, keys)} decoded from the page's inlined weights, and its data."""
    data = json.loads(re.search(r"const data = (\{.*?\});\n", page).group(1).replace("<\\/", "</"))
    maps = {}
    for block in data["sublayers"]:
        shape = (len(block["layers"]), len(block["heads"]), len(block["queries"]), len(block["keys"]))
        maps[block["name"]] = np.frombuffer(base64.b64decode(block["weights"]), dtype="<f4").reshape(shape)
    return maps, data


def test_the_maps_written_are_those_of_attention_maps_on_the_decoded_output(copy_run, tmp_path, capsys):
    run, data = copy_run
    line = first_lines(data, 1)[0]
    saved, page = tmp_path / "maps.pt", tmp_path / "page.html"
    assert main(["attend", str(run), "--input", line, "--beam", "1", "-o", str(page), "--save-maps", str(saved)]) == 0
    (attended,) = saved_dense(saved)
    loaded = LoadedRun(run)
    ids = loaded.src_vocab.encode(line.split())
    (hyp,) = translate_ids(loaded.model, [ids], beam=1)
    batch = make_batch(loaded.model.make_pool(), [ids], [hyp.tokens])
    assert set(attended["maps"]) == {"enc", "dec", "cross"}
    for sublayer, maps in attended["maps"].items():
        assert maps.shape[:2] == (2, 4)  # layers, heads
        torch.testing.assert_close(
            maps, attention_maps(loaded.model, batch, sublayer), equal_nan=True, rtol=0, atol=1e-6
        )
    decoded = [loaded.tgt_vocab.itos[t] for t in hyp.tokens]
    assert attended["tokens"]["cross"] == (["<s>", *decoded], [*line.split(), loaded.src_vocab.itos[EOS]])
    shown, data_of_page = page_maps(page.read_text())
    for sublayer, maps in attended["maps"].items():  # the page holds the same float32 numbers
        np.testing.assert_array_equal(shown[sublayer], maps.numpy())
    assert data_of_page["title"] == f"output: {attended['output']}"
    capsys.readouterr()
    source = tmp_path / "in.txt"
    source.write_text(line + "\n")
    assert main(["translate", str(run), "--input", str(source), "--beam", "1", "--quiet"]) == 0
    assert attended["output"] == capsys.readouterr().out.rstrip("\n")  # what translate writes for the line


def test_a_classifier_shows_its_argmax_label_and_probability(classifier_run, tmp_path, capsys):
    run, data = classifier_run
    lines = first_lines(data, 3)
    saved = tmp_path / "maps.pt"
    assert main(["attend", str(run), *[a for line in lines for a in ("--input", line)], "--save-maps", str(saved)]) == 0
    loaded = LoadedRun(run)
    pool = loaded.model.make_pool()
    for line, attended in zip(lines, saved_dense(saved)):
        labels, log_probs = loaded.model.predict(make_batch(pool, [loaded.src_vocab.encode(line.split())]))
        assert attended["output"] == loaded.tgt_vocab.itos[int(labels[0])]
        assert math.isclose(attended["probability"], math.exp(float(log_probs[0])), rel_tol=1e-5)
        assert set(attended["maps"]) == {"enc"}
        n = len(line.split()) + 2  # <cls>, the tokens, </s>
        assert attended["maps"]["enc"].shape == (1, 4, n, n)
        assert attended["tokens"]["enc"][0] == ["<cls>", *line.split(), "</s>"]
    page = tmp_path / "label.html"
    assert main(["attend", str(run), "--input", lines[0], "-o", str(page)]) == 0
    title = re.search(r"<title>(.*)</title>", page.read_text()).group(1)
    assert f"predicted label {saved_dense(saved)[0]['output']} (probability " in title
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{lines[0]}\tpredicted label ")


def test_several_inputs_write_a_picture_each_and_one_head_draws_smaller(copy_run, tmp_path):
    run, data = copy_run
    lines = first_lines(data, 2)
    out = tmp_path / "x.png"
    assert main(["attend", str(run), "--input", lines[0], "--input", lines[1], "-o", str(out), "--beam", "1"]) == 0
    assert not out.exists() and all(Image.open(tmp_path / f"x.{i}.png").format == "PNG" for i in (0, 1))
    one = tmp_path / "one.svg"
    argv = ["attend", str(run), "--input", lines[0], "--beam", "1", "--sublayer", "enc", "--layer", "-1", "--head", "2"]
    assert main([*argv, "-o", str(one)]) == 0
    assert "layer 2, head 2" in one.read_text() and "head 0" not in one.read_text()
    assert Image.open(tmp_path / "x.0.png").size[0] > 2 * 120 * 4  # four heads side by side, each wider than 2"


def test_the_python_call_returns_the_maps_and_writes_the_picture(copy_run, tmp_path):
    run, data = copy_run
    line = first_lines(data, 1)[0]
    out = tmp_path / "runs" / "x.pdf"
    out.parent.mkdir()
    (attended,) = graphformer.viz.attend(run, [line], out=out, sublayer="cross", beam=1)
    assert out.read_bytes().startswith(b"%PDF") and set(attended.maps) == {"cross"}
    queries, keys = attended.tokens["cross"]
    assert attended.maps["cross"].shape == (2, 4, len(queries), len(keys)) and keys[-1] == "</s>"
    totals = torch.nansum(attended.maps["cross"], dim=-1)
    torch.testing.assert_close(totals, torch.ones_like(totals))


def test_a_run_with_sample_edges_attends_along_the_edges_given(edges_run, tmp_path, capsys):
    edges = tmp_path / "in.edges"
    edges.write_text(" ".join(f"{k}-{q}" for k, q in mirrored(3)) + "\n")
    saved = tmp_path / "maps.pt"
    argv = ["attend", str(edges_run), "--input", "a b c", "--sublayer", "enc", "--save-maps", str(saved)]
    assert main([*argv, "--edges", str(edges)]) == 0
    drawn = ~torch.isnan(saved_dense(saved)[0]["maps"]["enc"][0, 0])
    expected = torch.zeros(4, 4, dtype=torch.bool)
    for key, query in mirrored(3):
        expected[query, key] = True
    assert torch.equal(drawn, expected)
    capsys.readouterr()
    refused(capsys, ["--input", "a b c"], edges_run, tmp_path / "no-edges.png", "give --edges FILE")


def _shown(driver):
    """The head view's chosen (sub-layer, layer, head) option texts and its read-out."""
    return driver.execute_script("""
        const text = s => { const e = document.querySelector(s); return e.options[e.selectedIndex].text; };
        return [text(".sublayer"), text(".layer"), text(".headnum"), document.querySelector(".readout").textContent];""")


def test_the_page_opens_offline_and_clicking_a_head_shows_its_weights(copy_run, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from test_player import _requested_urls

    run, data = copy_run
    page = tmp_path / "page.html"
    line = first_lines(data, 1)[0]
    assert main(["attend", str(run), "--input", line, "--beam", "1", "-o", str(page)]) == 0
    maps, _ = page_maps(page.read_text())
    browser.set_window_size(1400, 2400)  # the head view whole in the window, where the pointer can reach it
    browser.get(page.as_uri())
    thumbs = browser.find_elements(By.CSS_SELECTOR, "canvas.thumb")
    assert len(thumbs) == 3 * 2 * 4  # every sub-layer's layers by heads
    assert _shown(browser)[:3] == ["enc", "1", "0"]
    cross_layer2_head3 = next(t for t in thumbs if t.get_attribute("title") == "cross layer 2, head 3")
    cross_layer2_head3.click()
    assert _shown(browser)[:3] == ["cross", "2", "3"]
    big = browser.find_element(By.CSS_SELECTOR, "canvas.big")
    queries, keys = maps["cross"].shape[2:]
    width, height = big.size["width"], big.size["height"]
    # the pointer over the last query's last key reads out its weight
    ActionChains(browser).move_to_element_with_offset(big, width // 2 - 2, height // 2 - 2).perform()
    readout = _shown(browser)[3]
    assert readout.endswith(f": {maps['cross'][1, 3, queries - 1, keys - 1]:.3f}") and " \u2192 </s>: " in readout
    outside = [url for url in _requested_urls(browser) if not url.startswith(("file:", "data:"))]
    assert outside == [], "the page must load nothing from the network"
    assert [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []


def refused(capsys, argv, run, output, *needles):
    """``attend`` with ``argv`` exits 2 with one line holding ``needles``, leaves ``run`` as it
    was and writes no ``output``."""
    before = snapshot(run)
    try:
        status = main(["attend", str(run), *argv, "-o", str(output)])
    except SystemExit as parse_error:  # argparse's own refusals end there
        status = parse_error.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("graphformer") and "error: " in err, err
    assert all(needle in err for needle in needles), err
    assert snapshot(run) == before and not output.exists() and not list(output.parent.glob(f"{output.stem}*"))


def test_bad_input_is_one_line_and_writes_nothing(copy_run, classifier_run, tmp_path, capsys, monkeypatch):
    run, data = copy_run
    line = first_lines(data, 1)[0]
    out = tmp_path / "out.png"
    too_long = " ".join(["a"] * LoadedRun(run).model.cfg.max_len)
    refused(capsys, ["--input", too_long], run, out, "input line 1 has", "positional table (max_len")
    refused(capsys, ["--input", line, "--input", ""], run, out, "input line 2 is empty")
    refused(capsys, ["--input", line, "--sublayer", "self"], run, out, "invalid choice: 'self'")
    refused(capsys, ["--input", line, "--layer", "2"], run, out, "--layer 2 is out of range: the model has 2 layers")
    refused(capsys, ["--input", line, "--head", "4"], run, out, "--head 4 is out of range: the model has 4 heads")
    refused(capsys, ["--input", line], run, tmp_path / "out.gif", ".gif is not a format written here", ".html")
    refused(capsys, ["--input-file", str(tmp_path / "none.txt")], run, out, "--input-file", "not found")
    refused(capsys, ["--input", line, "--save-maps", str(tmp_path / "m.npy")], run, out, "ending in .pt")
    classifier, _ = classifier_run
    refused(capsys, ["--input", "a b", "--sublayer", "cross"], classifier, out, "no cross attention", "enc only")
    monkeypatch.setattr("graphformer.viz.attend_page.MAX_PAGE_CELLS", 100)
    page = tmp_path / "big.html"
    refused(capsys, ["--input", line], run, page, "more than the 100 a browser", "--sublayer, --layer or --head")
    refused(capsys, ["--input", line, "--sublayer", "enc", "--save-maps", str(tmp_path / "m.pt")], run, page, "100")
    assert not (tmp_path / "m.pt").exists()
    capsys.readouterr()
    assert main(["attend", str(run), "--input", line]) == 2
    assert "nothing to write; give -o FILE" in capsys.readouterr().err


def test_a_run_without_a_checkpoint_is_refused(copy_run, tmp_path, capsys):
    run, _ = copy_run
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_bytes((run / "config.json").read_bytes())
    refused(capsys, ["--input", "a b"], empty, tmp_path / "out.png", f"no checkpoint in {empty}")


def test_tokens_outside_the_vocabulary_are_a_warning_counted_as_translate_counts_them(copy_run, tmp_path, capsys):
    run, _ = copy_run
    out = tmp_path / "x.png"
    assert main(["attend", str(run), "--input", "a QQ b QQ ZZ", "--beam", "1", "-o", str(out)]) == 0
    warning = [e for e in capsys.readouterr().err.splitlines() if "warning" in e]
    assert warning == [
        "graphformer: warning: 3 input tokens (2 distinct) are not in the vocabulary and read as <unk>: QQ, ZZ"
    ]
    assert out.is_file()
