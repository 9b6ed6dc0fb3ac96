#!/usr/bin/env bash
# Multi30k English->German with the DGL example's model (6 layers, d_model 512, 8 heads) on a GPU.
# Works with the plain install (attention on the GPU via the torch/padded backends; see the README).
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin}  # the repository's, from any folder
RUN=${RUN:-runs/multi30k-gpu}
MIRROR=${1:-}
"$BIN/graphformer" train --task multi30k ${MIRROR:+--data-dir "$MIRROR"} --out "$RUN" --device cuda \
    --layers 6 --d-model 512 --heads 8 --d-ff 2048 --dropout 0.1 --tie all --min-count 2 \
    --batch-tokens 8000 --warmup 4000 --lr-factor 1.0 --label-smoothing 0.1 --epochs 40 --max-len 256
"$BIN/graphformer" evaluate "$RUN" --split test --beam 5 --alpha 0.6 --device cuda --json
