#!/usr/bin/env bash
# The main job (make demo): train the copy task on CPU, then report test exact match and examples.
set -euo pipefail
BIN=${BIN:-.venv/bin}
RUN=${RUN:-runs/demo-copy}
if [ -e "$RUN" ]; then
    echo "$RUN exists from an earlier demo; remove it to train again (rm -r $RUN)" >&2
else
    # The defaults are these settings: 2 layers, d_model 128, 4 heads, d_ff 256, dropout 0.1,
    # lr factor 0.5, warm-up 400, 64 sentences a batch, 12 epochs, seed 1.
    "$BIN/graphformer" train --task copy --out "$RUN"
fi
echo
"$BIN/graphformer" evaluate "$RUN" --split test --beam 1
echo
echo "a few test sentences (source => decoded):"
head -n 5 "$RUN/data/test.src" > "$RUN/examples.src"
"$BIN/graphformer" translate "$RUN" --input "$RUN/examples.src" --quiet > "$RUN/examples.out"
paste -d '\t' "$RUN/examples.src" "$RUN/examples.out" | sed 's/\t/   =>   /'
