#!/usr/bin/env bash
# Checkpoint, beam size and length penalty, chosen on the validation split only (never on test).
# Usage: bash examples/multi30k/tune.sh [RUN_DIR]
#   CHECKPOINTS="best averaged" BEAMS="5" ALPHAS="0.6 1.0 1.4" set the candidates (these are the defaults).
# Prints one JSON line per setting, then the winner as evaluate flags:
#   best on valid: --checkpoint C --beam B --alpha A (tokenized BLEU X)
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin}  # the repository's, from any folder
RUN=${1:-runs/multi30k-cpu}
best=""
for checkpoint in ${CHECKPOINTS:-best averaged}; do
    for beam in ${BEAMS:-5}; do
        for alpha in ${ALPHAS:-0.6 1.0 1.4}; do
            # evaluate's own one-line error, if any, ends the script (set -e): nothing half-parsed
            scores=$("$BIN/graphformer" evaluate "$RUN" --split valid --checkpoint "$checkpoint" --beam "$beam" \
                     --alpha "$alpha" --json)
            bleu=$("$BIN/python" -c 'import json, sys
scores = json.load(sys.stdin)
if "bleu_tokenized" not in scores:
    sys.exit(f"tune.sh: {sys.argv[1]} has no BLEU (not a translation run); tune a Multi30k run")
print(scores["bleu_tokenized"])' "$RUN" <<< "$scores")
            echo "{\"checkpoint\": \"$checkpoint\", \"beam\": $beam, \"alpha\": $alpha, \"valid_bleu_tokenized\": $bleu}"
            if [ -z "$best" ] || "$BIN/python" -c "import sys; sys.exit(not $bleu > ${best##* })"; then
                best="$checkpoint $beam $alpha $bleu"
            fi
        done
    done
done
read -r checkpoint beam alpha bleu <<< "$best"
echo "best on valid: --checkpoint $checkpoint --beam $beam --alpha $alpha (tokenized BLEU $bleu)"
