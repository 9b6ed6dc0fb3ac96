#!/usr/bin/env bash
# Multi30k English->German with the DGL example's model (6 layers, d_model 512, 8 heads) on a GPU.
# Works with the plain install (attention on the GPU via the torch/padded backends; see the README).
# The recipe is gpu.yaml; TRAIN_FLAGS="--epochs 50 ..." adds train options to it, or overrides them.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin}  # the repository's, from any folder
RUN=${RUN:-runs/multi30k-gpu}
MIRROR=${1:-}
read -r -a extra <<< "${TRAIN_FLAGS:-}"
"$BIN/graphformer" train --config "$(dirname "$0")/gpu.yaml" ${MIRROR:+--data-dir "$MIRROR"} --out "$RUN" \
    --device cuda "${extra[@]}"
"$BIN/graphformer" evaluate "$RUN" --split test --beam 5 --alpha 0.6 --device cuda --json
