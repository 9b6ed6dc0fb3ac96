#!/usr/bin/env bash
# Multi30k English->German, sized for 2 CPU cores (meant to finish within about 2 hours).
# Usage: bash examples/multi30k/cpu.sh [MIRROR_DIR]   (without a mirror the raw files are downloaded)
# Interrupted (Ctrl-C)? Run the same command again: training resumes from the last checkpoint.
set -euo pipefail
BIN=${BIN:-.venv/bin}
RUN=${RUN:-runs/multi30k-cpu}
MIRROR=${1:-}
RESUME=()
[ -e "$RUN/checkpoint_last.pt" ] && RESUME=(--resume)
"$BIN/graphformer" train --task multi30k ${MIRROR:+--data-dir "$MIRROR"} --out "$RUN" "${RESUME[@]}" \
    --layers 3 --d-model 256 --heads 4 --d-ff 1024 --dropout 0.1 --tie all --min-count 2 \
    --batch-tokens 6000 --warmup 1000 --lr-factor 1.0 --label-smoothing 0.1 --epochs 20 --max-len 256
"$BIN/graphformer" evaluate "$RUN" --split valid --beam 5 --alpha 0.6 --json
"$BIN/graphformer" evaluate "$RUN" --split test --beam 5 --alpha 0.6 --json
