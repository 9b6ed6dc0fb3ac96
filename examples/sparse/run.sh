#!/usr/bin/env bash
# Copy and sort with sparse attention patterns next to full attention; prints one line per run.
# Usage: bash examples/sparse/run.sh [EPOCHS]   (results also in runs/sparse/epochs-EPOCHS/*/metrics.jsonl)
# A run that is there already is reused, and one that was interrupted is finished first.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin}  # the repository's, from any folder
EPOCHS=${1:-6}
MODEL=(--layers 2 --d-model 128 --heads 4 --d-ff 256 --dropout 0.1 --lr-factor 0.5 --batch-size 64 --quiet)
run() {  # name task enc dec cross
    local out=runs/sparse/epochs-$EPOCHS/$1
    if [ -e "$out/checkpoint_last.pt" ]; then
        "$BIN/graphformer" train --out "$out" --resume --quiet > /dev/null
    else
        "$BIN/graphformer" train --task "$2" --out "$out" --epochs "$EPOCHS" \
            --enc-attention "$3" --dec-attention "$4" --cross-attention "$5" "${MODEL[@]}" > /dev/null
    fi
    printf '%-14s %-5s enc=%-16s dec=%-18s cross=%-10s ' "$1" "$2" "$3" "$4" "$5"
    "$BIN/graphformer" evaluate "$out" --split test --beam 1 | sed 's/^test: //'
}
run copy-full      copy full     causal            full
run copy-window    copy window:2 causal-window:2   window:1
run sort-full      sort full     causal            full
run sort-window    sort window:2 causal-window:2   window:1
run sort-win+glob  sort window:2+global:1 causal-window:2+causal-global:1 window:1+global:1
run sort-tree      sort tree:1   causal-window:2   window:1
