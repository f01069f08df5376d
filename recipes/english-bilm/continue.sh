#!/usr/bin/env bash
# Continues the default English biLM (elmo_hf.DEFAULT_MODEL): STEPS more steps of 64 sentences on the same mix,
# from the packaged float16 model at START_COMMIT, a commit of this clone's history (default: the first model shipped),
# with a new AdamW state, 100 warm-up steps to LEARNING_RATE (1.5e-3) and a linear decay to 0, batches in the order
# that SEED (1) draws. The shipped weights came from a chain of such runs (docs/experiments.md lists them, each with
# its commit). One continuation, then its packaging and evaluation:
#
#     START_COMMIT=COMMIT STEPS=12000 THREADS=2 LEARNING_RATE=1e-3 SEED=13 OUT=training/english-continued \
#         MINUTES=100 bash recipes/english-bilm/continue.sh
#     python recipes/english-bilm/package.py training/english-continued/run/checkpoint-12000 \
#         --num-sampled-negatives 1024 --output-dir elmo_hf/pretrained/elmo-english-small \
#         --evaluate test_subset=tests/data/english_test_subset.txt
#     bash recipes/english-bilm/evaluate.sh outputs/eval-continued
#
# STEPS (12000) sizes the run and its decay; THREADS (1) sets the threads, the same on every resume for bit-exact
# resumes. Run again after an interruption to continue from the last checkpoint in OUT (saved every 500 steps), on the
# same machine: training/ and outputs/ are git-ignored, and only the packaged model is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."

START_COMMIT=${START_COMMIT:-5fbacbc} # the commit whose shipped model the run starts from
CORPUS=${CORPUS:-outputs/corpus}
OUT=${OUT:-outputs/english-second-run}
MINUTES=${MINUTES:-150}              # a safety stop only: the run is sized by steps
STEPS=${STEPS:-12000}                # the linear decay ends here
THREADS=${THREADS:-1}                # bit-exact resumes need the same count
LEARNING_RATE=${LEARNING_RATE:-1.5e-3}
SEED=${SEED:-1}

source recipes/english-bilm/steps.sh
write_default_mix "$CORPUS" lessreligious

start="$OUT/start"
mkdir -p "$start"
for file in config.json model.safetensors tokenizer_config.json vocab.txt; do
    git show "$START_COMMIT:elmo_hf/pretrained/elmo-english-small/$file" > "$start/$file"
done

resume_from_last "$OUT/run"
OMP_NUM_THREADS=$THREADS python examples/run_bilm_pretraining.py --model_name_or_path "$start" \
    --train_file outputs/default-bilm-mix/train.txt --output_dir "$OUT/run" --do_train \
    --max_words_per_sentence 80 --train_sampling_strategy group_by_length \
    --optim adamw_torch --learning_rate "$LEARNING_RATE" --weight_decay 0 --warmup_steps 100 --lr_scheduler_type linear \
    --max_steps "$STEPS" --per_device_train_batch_size 64 --max_grad_norm 1.0 \
    --save_strategy steps --save_steps 500 --save_total_limit 1 --logging_steps 50 --report_to none \
    --use_cpu --seed "$SEED" --max_train_minutes "$MINUTES" --disable_tqdm true "${resume[@]}"
