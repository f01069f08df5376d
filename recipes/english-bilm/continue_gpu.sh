#!/usr/bin/env bash
# Continued runs of the default English biLM (elmo_hf.DEFAULT_MODEL) on one borrowed GPU, several at once, with the
# CUDA tests beside them, in one device call. The eager training step is launch-bound on a GPU (a few thousand small
# kernels a step, the GPU idle most of the time; benchmarks/RESULTS.md, "Training the biLM on a GPU"), so runs in
# separate processes share it at little cost each, and one lease compares settings instead of guessing one.
#
#   bash recipes/english-bilm/train_gpu.sh --prepare                   # here, once: .gpu-train/ (the same mix as the CPU runs)
#   mkdir -p .gpu && cp -r ../shared/fixtures .gpu/fixtures   # here: the fixtures for the CUDA tests' parity checks
#   bash recipes/english-bilm/continue_gpu.sh "$OUT"            # on the device, carrying .gpu-train and .gpu/fixtures
#   tar -xf FILES_AT/NAME.tar -C DIR && bash recipes/english-bilm/train_gpu.sh --join DIR elmo_hf/pretrained/NAME   # here
#
# Settings (environment): VARIANTS, space-separated NAME:BATCH:NEGATIVES:LEARNING_RATE (NEGATIVES 0: the full
# softmax), MINUTES of training each (4), WORKERS data-loading processes per run (3), START_MODEL (the shipped model),
# TESTS (1: run the CUDA tests beside the training; 0: not). Writes OUT/session.log (the tests), OUT/NAME.log (each
# run's console, as it goes) and OUT/NAME.tar per variant (recipes/english-bilm/train_gpu.sh's output: config, vocabulary,
# model pieces, train.log).
#
# Size the call with room to spare: each run's start (imports, loading, the first steps' warm-up) and the tests come
# on top of MINUTES, and runs that share the GPU slow each other down.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bash recipes/english-bilm/continue_gpu.sh OUT_DIR}
VARIANTS=${VARIANTS:-"sampled512:512:1024:1e-3 full512:512:0:1e-3 full1024:1024:0:1.5e-3"}
export MINUTES=${MINUTES:-4} WORKERS=${WORKERS:-3} WARMUP=${WARMUP:-100}
export START_MODEL=${START_MODEL:-elmo_hf/pretrained/elmo-english-small}
TESTS=${TESTS:-1}
WORK=${GPU_CONTINUE_WORK:-/tmp/gpu-continue}
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/session.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD ELMO_FIXTURES=$PWD/.gpu/fixtures
echo "== $(date +%T) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo 'no GPU'); $VARIANTS"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

seed=0
runs=()
for variant in $VARIANTS; do
    IFS=: read -r name batch negatives rate <<< "$variant"
    BATCH=$batch NEGATIVES=$negatives LEARNING_RATE=$rate SEED=$((seed += 1)) GPU_TRAIN_RUN="$WORK/$name" \
        bash recipes/english-bilm/train_gpu.sh "$WORK/out-$name" > "$OUT/$name.log" 2>&1 &  # (streams back on a time-out)
    runs+=($!)
done
if [ "$TESTS" = 1 ]; then
    echo "== $(date +%T) the CUDA tests, beside the training"
    OMP_NUM_THREADS=2 timeout 240 python3 -m pytest -q -p no:cacheprovider tests/model/test_cuda.py \
        tests/model/test_cuda_graphs.py tests/model/test_cuda_kernels.py tests/model/test_paths_differential.py \
        tests/model/test_lstm_paths.py tests/model/test_weight_freshness.py 2>&1 | tail -25
fi
wait "${runs[@]}"  # (a bare wait would also wait for the log's tee, which never ends)
for variant in $VARIANTS; do
    name=${variant%%:*}
    tar -cf "$OUT/$name.tar" -C "$WORK/out-$name" .
done
echo "== $(date +%T) done"
ls -l "$OUT"
