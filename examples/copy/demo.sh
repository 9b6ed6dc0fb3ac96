#!/usr/bin/env bash
# The main job (make demo): train the copy task on CPU, then report test exact match and examples.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin}  # the repository's, from any folder
RUN=${RUN:-runs/demo-copy}
if [ -e "$RUN/checkpoint_last.pt" ]; then  # an earlier demo's: finish it if it was interrupted
    echo "$RUN exists from an earlier demo (rm -r $RUN to train again); finishing it if it was interrupted" >&2
    "$BIN/graphformer" train --out "$RUN" --resume
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
