#!/usr/bin/env bash
# A larger English biLM trained on one borrowed GPU inside one device call: a lease is 15 minutes and a call at most
# 10, so the text is prepared here, the learning rate's decay is sized to end when the minutes are up
# (run_bilm_pretraining.py --decay_within_time_limit), and the packaged float16 model comes back in pieces of at most
# 15 MB (the device returns at most 8 files of 16 MiB).
#
#   bash recipes/english-bilm/train_gpu.sh --prepare          # here, once: .gpu-train/ (git-ignored), the mix xz-compressed
#   bash recipes/english-bilm/train_gpu.sh "$OUT"             # on the device, carrying .gpu-train (timeout_s 600)
#   CONTINUE=1 MINUTES=2.6 LEARNING_RATE=1e-3 WARMUP=50 SEED=1 bash recipes/english-bilm/train_gpu.sh "$OUT"
#                                                   # on the same warm device: a second decay from the first run's end
#   bash recipes/english-bilm/train_gpu.sh --join FILES_AT elmo_hf/pretrained/NAME   # here: the packaged model, reassembled
#
# The device command: `bash recipes/english-bilm/train_gpu.sh $OUT` with carry [".gpu-train"]. It writes to OUT: train.log
# (the run, then the perplexity of the first 2,000 validation sentences), config.json, tokenizer_config.json,
# vocab.txt and model.safetensors.part-aa, -ab, ... Settings (environment): MINUTES of training (7: about 9 minutes
# for the whole call with start-up, vocabulary and packaging), LSTM_DIM (1024), PROJECTION_DIM (256), FILTERS
# (small), BATCH (512 sentences), LEARNING_RATE (3e-3), WARMUP (100 steps), NEGATIVES (1024 sampled), WORKERS (8
# data-loading processes), SEED (0), DEVICE_ARGS ("--tf32 true"; "--use_cpu" for a trial on a CPU), MIX
# (lessreligious, for --prepare). CONTINUE=1 starts from the last call's model (its shape and vocabulary; the shape
# settings are then unused) with a new optimizer and schedule, and writes $RUN/continued. START_MODEL=DIR does the
# same from a packaged model (the shipped one, say) on a fresh machine: its shape and vocabulary, the text unpacked.
# NEGATIVES=0 trains with the full softmax (what perplexity measures; on a GPU it costs little at this vocabulary); a
# run from an earlier model is packaged with that model's sampled-softmax setting, for further training on a CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${GPU_TRAIN_DATA:-.gpu-train}  # (a test points it elsewhere)

if [ "${1:-}" = "--prepare" ]; then
    MIX=${MIX:-lessreligious}
    mkdir -p "$DATA"
    grep -qx "/$DATA/" .git/info/exclude 2>/dev/null || echo "/$DATA/" >> .git/info/exclude
    if [ ! -f outputs/corpus/manifest.json ]; then
        python recipes/english-bilm/build_corpus.py outputs/corpus --expect
    fi
    python recipes/english-bilm/write_training_mix.py outputs/corpus "$MIX" outputs/gpu-mix
    python - outputs/gpu-mix "$DATA" <<'EOF'
import lzma
import shutil
import sys

source, data = sys.argv[1:]
for split in ("train", "valid"):
    with open(f"{source}/{split}.txt", "rb") as text, lzma.open(f"{data}/{split}.txt.xz", "wb", preset=6) as packed:
        shutil.copyfileobj(text, packed)
EOF
    du -b "$DATA"/*
    exit 0
fi

if [ "${1:-}" = "--join" ]; then
    FILES_AT=$2
    TARGET=$3
    mkdir -p "$TARGET"
    cat "$FILES_AT"/model.safetensors.part-* > "$TARGET/model.safetensors"
    cp "$FILES_AT"/config.json "$FILES_AT"/tokenizer_config.json "$FILES_AT"/vocab.txt "$TARGET"/
    python -c "import sys; from elmo_hf import ElmoModel; ElmoModel.from_pretrained(sys.argv[1]); print('loads')" \
        "$TARGET"
    exit 0
fi

OUT=${1:?usage: bash recipes/english-bilm/train_gpu.sh OUT_DIR (or --prepare, or --join FILES_AT TARGET)}
MINUTES=${MINUTES:-7}
LSTM_DIM=${LSTM_DIM:-1024}
PROJECTION_DIM=${PROJECTION_DIM:-256}
FILTERS=${FILTERS:-small}
BATCH=${BATCH:-512}
LEARNING_RATE=${LEARNING_RATE:-3e-3}
WORKERS=${WORKERS:-8}
NEGATIVES=${NEGATIVES:-1024}
WARMUP=${WARMUP:-100}
SEED=${SEED:-0}
DEVICE_ARGS=${DEVICE_ARGS:---tf32 true}
RUN=${GPU_TRAIN_RUN:-/tmp/gpu-bilm}
if [ -n "${CONTINUE:-}" ] && [ ! -d "$RUN/model" ]; then
    echo "CONTINUE=1: no earlier model at $RUN/model (a fresh machine?)" >&2
    exit 1
fi
mkdir -p "$OUT" "$RUN"
exec > >(tee -a "$OUT/train.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
echo "== $(date +%T) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo 'no GPU')"
if [ ! -f "$RUN/valid.txt" ]; then
    python -c "
import lzma, shutil, sys
for split in ('train', 'valid'):
    with lzma.open(f'$DATA/{split}.txt.xz') as packed, open(f'$RUN/{split}.txt', 'wb') as text:
        shutil.copyfileobj(packed, text)
"
fi
START=${START_MODEL:-}
if [ -n "${CONTINUE:-}" ]; then
    START=$RUN/model
fi
if [ -n "$START" ]; then
    model_args=(--model_name_or_path "$START")
    trained="$RUN/continued"
else
    model_args=(--filters "$FILTERS" --num_highway_layers 1 --max_characters_per_token 50 --lstm_dim "$LSTM_DIM"
        --projection_dim "$PROJECTION_DIM" --num_lstm_layers 2 --max_vocab_size 20000)
    trained="$RUN/model"
fi
# shellcheck disable=SC2086
python examples/run_bilm_pretraining.py --train_file "$RUN/train.txt" --output_dir "$trained" --do_train \
    "${model_args[@]}" --num_sampled_negatives "$NEGATIVES" --pretraining_dropout 0.15 \
    --max_words_per_sentence 80 --train_sampling_strategy group_by_length \
    --optim adamw_torch --learning_rate "$LEARNING_RATE" --weight_decay 0 --warmup_steps "$WARMUP" \
    --lr_scheduler_type linear --max_steps 1000000 --max_train_minutes "$MINUTES" --decay_within_time_limit true \
    --per_device_train_batch_size "$BATCH" --max_grad_norm 1.0 --dataloader_num_workers "$WORKERS" \
    --save_strategy no --logging_steps 50 --report_to none --disable_tqdm true --seed "$SEED" $DEVICE_ARGS
echo "== $(date +%T) packaging"
head -n 2000 "$RUN/valid.txt" > "$RUN/valid-2000.txt"  # the perplexity of the first 2,000 validation sentences
package_args=()
if [ -n "$START" ]; then  # the start model's softmax setting, not this run's (NEGATIVES=0 for a GPU run)
    package_args=(--num-sampled-negatives "$(python -c 'import json, sys
print(json.load(open(sys.argv[1]))["num_sampled_negatives"])' "$START/config.json")")
fi
python recipes/english-bilm/package.py "$trained" --output-dir "$RUN/packaged" \
    --evaluate valid-2000="$RUN/valid-2000.txt" "${package_args[@]}"
cat "$RUN/packaged/eval_results.json"
cp "$RUN/packaged"/config.json "$RUN/packaged"/tokenizer_config.json "$RUN/packaged"/vocab.txt "$OUT"/
split -b 15000000 "$RUN/packaged/model.safetensors" "$OUT/model.safetensors.part-"
echo "== $(date +%T) done"
ls -l "$OUT"
