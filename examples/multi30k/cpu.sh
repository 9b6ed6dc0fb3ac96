#!/usr/bin/env bash
# Multi30k English->German, sized for 2 CPU cores (about 2 hours of training and validation).
# Usage: bash examples/multi30k/cpu.sh [MIRROR_DIR]   (without a mirror the raw files are downloaded)
# Interrupted (Ctrl-C)? Run the same command again: training resumes from the last checkpoint.
# PRECISION=bfloat16 trains in bfloat16 (faster on a CPU with AVX512-BF16 or AMX; see docs/results.md).
# TRAIN_FLAGS="--epochs 30 ..." adds train options to the recipe's, or overrides them.
#
# 1. train with the recipe in cpu.yaml (24 epochs, dropout 0.2), keeping the checkpoints of the last 8;
# 2. average the 5 kept epochs with the lowest validation loss into checkpoint_averaged.pt;
# 3. choose the checkpoint (best single or averaged) and length penalty on val (tune.sh);
# 4. report val and test with that choice.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin}  # the repository's, from any folder
RUN=${RUN:-runs/multi30k-cpu}
MIRROR=${1:-}
HERE=$(dirname "$0")
RESUME=()
[ -e "$RUN/checkpoint_last.pt" ] && RESUME=(--resume)
read -r -a extra <<< "${TRAIN_FLAGS:-}"
"$BIN/graphformer" train --config "$HERE/cpu.yaml" ${MIRROR:+--data-dir "$MIRROR"} --out "$RUN" "${RESUME[@]}" \
    ${PRECISION:+--precision "$PRECISION"} "${extra[@]}"
"$BIN/graphformer" average "$RUN" --best 5
choice=$(BIN="$BIN" bash "$HERE/tune.sh" "$RUN" | tee /dev/stderr | tail -n 1)
read -r -a flags <<< "$(sed -e 's/^best on valid: //' -e 's/ (.*//' <<< "$choice")"
"$BIN/graphformer" evaluate "$RUN" --split valid "${flags[@]}" --json
"$BIN/graphformer" evaluate "$RUN" --split test "${flags[@]}" --json
