#!/usr/bin/env bash
# Beam size and length penalty, chosen on the validation split only (never on test).
# Usage: bash examples/multi30k/tune.sh [RUN_DIR]    prints one JSON line per setting, best last
set -euo pipefail
BIN=${BIN:-.venv/bin}
RUN=${1:-runs/multi30k-cpu}
best=""
for beam in ${BEAMS:-5}; do
    for alpha in ${ALPHAS:-0.0 0.6 1.0}; do
        bleu=$("$BIN/graphformer" evaluate "$RUN" --split valid --beam "$beam" --alpha "$alpha" --json \
               | "$BIN/python" -c 'import json, sys; print(json.load(sys.stdin)["bleu_tokenized"])')
        echo "{\"beam\": $beam, \"alpha\": $alpha, \"valid_bleu_tokenized\": $bleu}"
        if [ -z "$best" ] || "$BIN/python" -c "import sys; sys.exit(not $bleu > ${best##* })"; then
            best="$beam $alpha $bleu"
        fi
    done
done
read -r beam alpha bleu <<< "$best"
echo "best on valid: --beam $beam --alpha $alpha (tokenized BLEU $bleu)"
