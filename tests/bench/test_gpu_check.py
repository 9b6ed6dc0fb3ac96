"""The GPU check's parts that a CPU can hold to account: devices that follow the model, rows that
survive a failing neighbour, decoding differences counted rather than fatal, host syncs per
training step, and the rehearsal of ``make gpu-check`` itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_the_dense_peers_causal_mask_is_made_where_its_inputs_are():
    from benchmarks.peers import DensePeer

    peer = DensePeer(20, layers=1, d_model=16, heads=2, d_ff=32, dropout=0.0).to("meta")
    seen = {}

    class Core(torch.nn.Module):  # nn.Transformer itself reads the mask back (no meta kernel for that)
        def forward(self, src, tgt, tgt_mask, **masks):
            seen["mask"] = tgt_mask.device
            return tgt

    peer.core = Core()
    src, tgt = (torch.randint(4, 20, (3, n), device="meta") for n in (5, 6))
    peer(src, tgt)
    assert seen["mask"] == torch.device("meta")


def test_the_dense_twin_follows_the_models_device_and_dtype():
    from graphformer import make_model
    from graphformer.model.dense import to_torch_transformer

    model = make_model(20, layers=1, d_model=16, heads=2, d_ff=32).to("meta")
    twin = to_torch_transformer(model)
    assert {p.device for p in twin.parameters()} == {torch.device("meta")}
    twin = to_torch_transformer(make_model(20, layers=1, d_model=16, heads=2, d_ff=32).double())
    assert {p.dtype for p in twin.parameters()} == {torch.float64}


def test_a_failing_row_is_recorded_and_every_row_is_written_at_once(tmp_path):
    from benchmarks.gpu_stages import Rows

    rows = Rows(tmp_path / "rows.json", device="cpu")
    rows.attempt({"system": "breaks"}, lambda: 1 / 0)
    assert json.loads((tmp_path / "rows.json").read_text())["rows"][0]["error"].startswith("ZeroDivisionError")
    rows.attempt({"system": "works"}, lambda: {"tokens_per_s": 1.0})
    written = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert [r["system"] for r in written] == ["breaks", "works"] and written[1]["tokens_per_s"] == 1.0


def test_decoding_differences_from_the_dense_peer_are_counted_not_fatal():
    from benchmarks.gpu_stages import mismatches

    reference = [[5, 6, 7, 8], [5, 6, 7, 8], [9, 9]]
    assert mismatches([[5, 6, 7, 8], [5, 6, 9, 9], [9]], reference) == {
        "sentences_differing_from_dense": 2,
        "first_difference_at_step": [2, 1],
    }


def test_a_training_step_reads_its_loss_back_once_and_act_indexes_without_masks(tmp_path):
    from benchmarks import syncs

    rows = {
        r["system"]: r
        for r in syncs.measure("cpu", 1, {k: syncs.SETUPS[k] for k in ("transformer (torch)", "universal (padded)")})
    }
    torch_row, universal = rows["transformer (torch)"], rows["universal (padded)"]
    assert torch_row["micro_batches"] == 2 and torch_row["kinds"].get("__float__") == 1
    assert torch_row["per_step"] <= 9, torch_row  # left: the loss's pad mask and one embedding check per side
    # The ACT loop reads each step's mask once (nonzero); no boolean indexing, writes or sums of it.
    assert not {"__setitem__ (boolean index)", "index_put (boolean index)"} & set(universal["kinds"]), universal


@pytest.mark.slow
def test_the_rehearsal_fills_in_every_stage_and_marks_cuda_skipped(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.gpu_check",
            "--out",
            str(tmp_path),
            "--wheels",
            str(tmp_path / "none"),
            "--stages",
            "wheels",
            "imports",
            "decoding",
        ],
        cwd=ROOT,  # as make gpu-check runs it: from the repository root, no install
        capture_output=True,
        text=True,
        timeout=600,
    )
    result = json.loads((tmp_path / "gpu.json").read_text())
    stages = result["stages"]
    assert list(stages) == ["wheels", "imports", "decoding"], proc.stdout
    assert stages["wheels"]["status"] == "failed" and "make gpu-wheels" in stages["wheels"]["error"]
    assert proc.returncode == 1  # the missing wheels
    assert stages["imports"]["status"] == "ok" and stages["decoding"]["status"] == "ok", proc.stdout
    assert {r["beam"] for r in stages["decoding"]["rows"]} == {1, 5}
    if not torch.cuda.is_available():
        assert "skipped" in stages["decoding"]["cuda"] and "cuda" not in stages["imports"]
